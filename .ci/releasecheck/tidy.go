package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tidy checks (write false) or makes (write true) every module of the
// repository tidy, each on its own (GOWORK=off), our modules coming from the
// test proxy at version. Before the release, no go.sum can hold the checksums
// of our own modules at version (they do not exist yet, and the test proxy's
// change with every commit), so those lines are left out: tidy's wish to add
// them is not a difference, and -w removes them.
func tidy(ctx context.Context, r *repo, host hostGoEnv, tmp, version string, write bool, logf func(string, ...any)) error {
	if write {
		return tidyWrite(ctx, r, host, tmp, version, logf)
	}
	e, err := tidyEnv(r, host, filepath.Join(tmp, "tidy"), version, logf)
	if err != nil {
		return err
	}
	var untidy []string
	for _, m := range r.Modules {
		out, err := e.run(ctx, filepath.Join(r.Root, filepath.FromSlash(m.Dir)), "mod", "tidy", "-diff")
		if err == nil {
			continue
		}
		if !strings.HasPrefix(out, "diff ") && !strings.Contains(out, "\ndiff ") {
			return err // not a difference: tidy itself failed
		}
		if changes := significantChanges(out, r.rootPath()); len(changes) > 0 {
			untidy = append(untidy, fmt.Sprintf("./%s (go mod tidy would change):\n\t%s", m.Dir, strings.Join(changes, "\n\t")))
		}
	}
	if len(untidy) > 0 {
		return fmt.Errorf("not tidy; run make tidy:\n%s", strings.Join(untidy, "\n"))
	}
	ds, err := drifts(ctx, r, logf)
	if err != nil {
		return err
	}
	var drifted []string
	for _, d := range ds {
		drifted = append(drifted, fmt.Sprintf("./%s requires %s %s, but its tests run with %s in the workspace", d.m.Dir, d.path, d.required, d.tested))
	}
	if len(drifted) > 0 {
		return fmt.Errorf("what a stranger builds is not what CI tests; run make tidy:\n\t%s", strings.Join(drifted, "\n\t"))
	}
	return nil
}

// A drift is a module path that the module m builds at one version in the
// workspace, where CI runs its tests, and requires at another.
type drift struct {
	m                      *gomod
	path, required, tested string
}

// drifts returns the drifts of every module of r (see untested).
func drifts(ctx context.Context, r *repo, logf func(string, ...any)) ([]drift, error) {
	ws := workspaceEnv(r, logf)
	var all []drift
	for _, m := range r.Modules {
		ds, err := untested(ctx, ws, r, m)
		if err != nil {
			return nil, err
		}
		all = append(all, ds...)
	}
	return all, nil
}

// workspaceEnv is the go environment of the working tree as make test runs
// in it: the host's, with the workspace.
func workspaceEnv(r *repo, logf func(string, ...any)) *goEnv {
	return &goEnv{env: os.Environ(), base: r.Root, logf: logf}
}

// untested returns the drifts of m: the modules its packages and their
// tests use at another version in the workspace (which selects, for each
// module, the highest any of our modules requires) than m's go.mod
// requires. A tidy go.mod requires every module its packages need at the
// version selected, so it is the build list a stranger gets: a drift is a
// version that stranger builds and CI never tested.
func untested(ctx context.Context, ws *goEnv, r *repo, m *gomod) ([]drift, error) {
	out, err := ws.run(ctx, filepath.Join(r.Root, filepath.FromSlash(m.Dir)), "list", "-deps", "-test",
		"-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./...")
	if err != nil {
		return nil, err
	}
	required := map[string]string{}
	for _, req := range m.File.Require {
		required[req.Mod.Path] = req.Mod.Version
	}
	seen := map[string]bool{}
	var ds []drift
	for line := range strings.SplitSeq(out, "\n") {
		path, version, ok := strings.Cut(line, " ")
		if !ok || version == "" || seen[path] || isOurs(r.rootPath(), path) {
			continue // a main module of the workspace, or ours (required at the release's version)
		}
		seen[path] = true
		if v, ok := required[path]; ok && v != version {
			ds = append(ds, drift{m: m, path: path, required: v, tested: version})
		}
	}
	return ds, nil
}

// tidyWrite runs go mod tidy in every module until nothing changes: a module
// tidied changes what the test proxy serves to the modules requiring it, so
// each pass has a proxy and a module cache of its own.
//
// Then each module requires the versions its tests run with in the
// workspace (see untested), and is tidied again.
func tidyWrite(ctx context.Context, r *repo, host hostGoEnv, tmp, version string, logf func(string, ...any)) error {
	for round := 1; ; round++ {
		if err := tidyPasses(ctx, r, host, filepath.Join(tmp, fmt.Sprint("round", round)), version, logf); err != nil {
			return err
		}
		var err error
		if r, err = loadRepo(r.Root); err != nil {
			return err
		}
		ds, err := drifts(ctx, r, logf)
		if err != nil {
			return err
		}
		ws := workspaceEnv(r, logf)
		for _, d := range ds {
			logf("   ./%s: %s %s, as its tests run with (was %s)", d.m.Dir, d.path, d.tested, d.required)
			if _, err := ws.run(ctx, filepath.Join(r.Root, filepath.FromSlash(d.m.Dir)), "mod", "edit", "-require="+d.path+"@"+d.tested); err != nil {
				return err
			}
		}
		switch {
		case len(ds) == 0:
			return nil
		case round == 3:
			return fmt.Errorf("the modules still require other versions than the workspace tests after 3 rounds")
		}
		if r, err = loadRepo(r.Root); err != nil {
			return err
		}
	}
}

// tidyPasses runs go mod tidy in every module until nothing changes.
func tidyPasses(ctx context.Context, r *repo, host hostGoEnv, tmp, version string, logf func(string, ...any)) error {
	for pass := 1; pass <= 5; pass++ {
		e, err := tidyEnv(r, host, filepath.Join(tmp, fmt.Sprint("tidy", pass)), version, logf)
		if err != nil {
			return err
		}
		changed := false
		for _, m := range r.Modules {
			dir := filepath.Join(r.Root, filepath.FromSlash(m.Dir))
			before := readFiles(dir, "go.mod", "go.sum")
			if _, err := e.run(ctx, dir, "mod", "tidy"); err != nil {
				return err
			}
			if err := dropOwnSums(filepath.Join(dir, "go.sum"), r.rootPath()); err != nil {
				return err
			}
			if readFiles(dir, "go.mod", "go.sum") != before {
				logf("   ./%s changed", m.Dir)
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if r, err = loadRepo(r.Root); err != nil {
			return err
		}
	}
	return fmt.Errorf("go mod tidy still changes the modules after 5 passes")
}

// tidyEnv writes the test proxy under dir and returns the go environment for
// go mod tidy with it (no -mod flag: tidy takes none).
func tidyEnv(r *repo, host hostGoEnv, dir, version string, logf func(string, ...any)) (*goEnv, error) {
	proxyDir := filepath.Join(dir, "proxy")
	if _, err := writeProxy(r, proxyDir, version, time.Now()); err != nil {
		return nil, err
	}
	return &goEnv{env: strangerEnv(host, filepath.Join(dir, "gopath"), proxyDir, r.rootPath(), "-modcacherw"), base: r.Root, logf: logf}, nil
}

// readFiles returns the contents of the named files in dir, concatenated.
func readFiles(dir string, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		data, _ := os.ReadFile(filepath.Join(dir, n))
		b.WriteString(n + "\x00")
		b.Write(data)
	}
	return b.String()
}

// significantChanges returns the added and removed lines of a go mod tidy
// -diff output, except go.sum lines of our own modules (rootPath and below).
func significantChanges(diff, rootPath string) []string {
	var changes []string
	file := ""
	for line := range strings.SplitSeq(diff, "\n") {
		switch {
		case strings.HasPrefix(line, "+++ ") || strings.HasPrefix(line, "--- "):
			file = filepath.Base(strings.Fields(line)[1])
			continue
		case !strings.HasPrefix(line, "+") && !strings.HasPrefix(line, "-"):
			continue
		}
		if file == "go.sum" && isOwnSum(line[1:], rootPath) {
			continue
		}
		changes = append(changes, file+": "+line)
	}
	return changes
}

// isOwnSum reports whether a go.sum line is the checksum of one of our modules.
func isOwnSum(line, rootPath string) bool {
	mod, _, _ := strings.Cut(line, " ")
	return isOurs(rootPath, mod)
}

// dropOwnSums removes the lines of our own modules from the go.sum file name.
func dropOwnSums(name, rootPath string) error {
	data, err := os.ReadFile(name)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var kept []string
	for line := range strings.Lines(string(data)) {
		if !isOwnSum(line, rootPath) {
			kept = append(kept, line)
		}
	}
	return os.WriteFile(name, []byte(strings.Join(kept, "")), 0o644)
}
