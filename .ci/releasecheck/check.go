package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// serveSpec is the command the check starts after installing it, and how it
// is asked whether it is up.
type serveSpec struct {
	Binary string   // name of the installed binary
	Args   []string // must make it listen on a free loopback port and print its URL on stdout
	Health string   // path answered 200 when up
	// StopWait is how long it has to exit after SIGTERM before it is killed.
	StopWait time.Duration
	// Probe, when set, is an installed command (its name, then its
	// arguments, where {URL} stands for the served URL) that runs while the
	// server is up, after Health answered, and must exit with status 0.
	Probe []string
}

// releaseCheck proves that a stranger can use the modules at version, served
// by the test proxy written to tmp:
//  1. every module, extracted from its zip, with the checksums of ours added
//     to its go.sum as after the release, vets and builds with GOWORK=off and
//     -mod=readonly (a module not published, such as this tool, where it is);
//  2. every command module (root package main) installs with
//     go install path@version;
//  3. every library module (one another of ours requires; internal ones
//     aside) can be added to a new module with go get path@version, and its
//     root package builds there;
//  4. the installed serve.Binary starts, answers serve.Health, passes the
//     installed serve.Probe (idem-check against it) and stops on SIGTERM with
//     status 0.
//
// Every go command runs in an empty GOPATH under tmp.
func releaseCheck(ctx context.Context, r *repo, host hostGoEnv, tmp, version string, serve serveSpec, logf func(string, ...any)) error {
	proxyDir := filepath.Join(tmp, "proxy")
	zips, err := writeProxy(r, proxyDir, version, time.Now())
	if err != nil {
		return err
	}
	logf("== test proxy at %s: %d modules at %s", proxyDir, len(zips), version)
	gopath := filepath.Join(tmp, "gopath")
	// No -mod=mod: it would quietly add a missing requirement (an import no
	// go.mod line provides) where a stranger's build fails.
	e := &goEnv{env: strangerEnv(host, gopath, proxyDir, r.rootPath(), "-modcacherw -trimpath"), base: tmp, logf: logf}
	sums, err := ownSums(ctx, e, r, tmp, version)
	if err != nil {
		return err
	}

	logf("== GOWORK=off go vet and go build in every module, as extracted from its zip")
	var commands []*gomod
	for _, m := range r.ours() {
		src := filepath.Join(tmp, "src", m.Path+"@"+version)
		if err := modzip.Unzip(src, module.Version{Path: m.Path, Version: version}, zips[m.Path]); err != nil {
			return err
		}
		// What the go.sum will hold once the modules are published.
		if err := appendFile(filepath.Join(src, "go.sum"), sums); err != nil {
			return err
		}
		if _, err := e.run(ctx, src, "vet", "./..."); err != nil {
			return err
		}
		if _, err := e.run(ctx, src, "build", "./..."); err != nil {
			return err
		}
		if name, _ := rootPackage(src); name == "main" {
			commands = append(commands, m)
		}
	}

	for _, m := range r.Modules {
		if isOurs(r.rootPath(), m.Path) {
			continue
		}
		// Not published (the CI tool): checked where it is, on its own; its
		// binaries go to tmp, not into the tree.
		dir := filepath.Join(r.Root, filepath.FromSlash(m.Dir))
		if _, err := e.run(ctx, dir, "vet", "./..."); err != nil {
			return err
		}
		if _, err := e.run(ctx, dir, "build", "-o", filepath.Join(tmp, "bin")+string(filepath.Separator), "./..."); err != nil {
			return err
		}
	}

	logf("== go install of every command module")
	for _, m := range commands {
		if _, err := e.run(ctx, tmp, "install", m.Path+"@"+version); err != nil {
			return err
		}
	}

	logf("== go get of every library module in a new module")
	scratch := filepath.Join(tmp, "scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	if _, err := e.run(ctx, scratch, "mod", "init", "example.com/stranger"); err != nil {
		return err
	}
	for _, m := range r.libraries() {
		if isInternal(m.Path) {
			continue // no stranger imports it; go get of the modules requiring it fetches it
		}
		if _, err := e.run(ctx, scratch, "get", m.Path+"@"+version); err != nil {
			return err
		}
		name, _ := rootPackage(filepath.Join(r.Root, filepath.FromSlash(m.Dir)))
		if name != "" && name != "main" {
			if _, err := e.run(ctx, scratch, "build", m.Path); err != nil {
				return err
			}
		}
	}

	bin := filepath.Join(gopath, "bin", serve.Binary)
	logf("== %s %s answers %s", serve.Binary, strings.Join(serve.Args, " "), serve.Health)
	if len(serve.Probe) > 0 {
		logf("== and passes %s", strings.Join(serve.Probe, " "))
		serve.Probe = append([]string{filepath.Join(gopath, "bin", serve.Probe[0])}, serve.Probe[1:]...)
	}
	return serveOnce(ctx, bin, serve)
}

// ownSums returns the go.sum lines of our modules at version as the test
// proxy serves them (go mod download computes them).
func ownSums(ctx context.Context, e *goEnv, r *repo, tmp, version string) (string, error) {
	var b strings.Builder
	for _, m := range r.ours() {
		out, err := e.run(ctx, tmp, "mod", "download", "-json", m.Path+"@"+version)
		if err != nil {
			return "", err
		}
		var d struct{ Path, Version, Sum, GoModSum string }
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.Sum == "" || d.GoModSum == "" {
			return "", fmt.Errorf("go mod download -json %s@%s: no checksums in %q (%v)", m.Path, version, out, err)
		}
		fmt.Fprintf(&b, "%s %s %s\n%s %s/go.mod %s\n", d.Path, d.Version, d.Sum, d.Path, d.Version, d.GoModSum)
	}
	return b.String(), nil
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}

// rootPackage returns the package name of the non-test Go files in dir, or ""
// if there are none.
func rootPackage(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, n), nil, parser.PackageClauseOnly)
			if err != nil {
				return "", err
			}
			return f.Name.Name, nil
		}
	}
	return "", nil
}

func isInternal(p string) bool {
	for elem := range strings.SplitSeq(p, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}

// listening finds the server's URL in the line it prints when it listens.
var listening = regexp.MustCompile(`https?://[^\s"]+`)

// serveOnce starts bin, waits for the URL it prints on stdout, checks that
// spec.Health answers 200 and that spec.Probe passes, then stops it with
// SIGTERM and wants status 0.
func serveOnce(ctx context.Context, bin string, spec serveSpec) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, spec.Args...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		exited <- cmd.Wait() // after stdout is drained, as StdoutPipe requires
	}()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(spec.StopWait):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("still running %v after SIGTERM; killed", spec.StopWait)
		}
	}

	var url string
	select {
	case line, ok := <-lines:
		url = listening.FindString(line)
		if !ok || url == "" {
			_ = stop()
			return fmt.Errorf("%s printed no URL on stdout (first line %q); stderr:\n%s", bin, line, stderr.String())
		}
	case <-ctx.Done():
		_ = stop()
		return fmt.Errorf("%s did not say where it listens: %w; stderr:\n%s", bin, ctx.Err(), stderr.String())
	}
	healthErr := checkHealth(ctx, strings.TrimSuffix(url, "/")+"/"+strings.TrimPrefix(path.Clean("/"+spec.Health), "/"))
	if healthErr == nil && len(spec.Probe) > 0 {
		healthErr = runProbe(ctx, spec.Probe, strings.TrimSuffix(url, "/"))
	}
	if err := stop(); err != nil {
		return errors.Join(healthErr, fmt.Errorf("%s after SIGTERM: %w; stderr:\n%s", bin, err, stderr.String()))
	}
	return healthErr
}

func checkHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s, want 200", url, resp.Status)
	}
	return nil
}

// runProbe runs probe with {URL} in its arguments replaced by url, and wants
// exit status 0.
func runProbe(ctx context.Context, probe []string, url string) error {
	args := make([]string, len(probe)-1)
	for i, a := range probe[1:] {
		args[i] = strings.ReplaceAll(a, "{URL}", url)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, probe[0], args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", probe[0], strings.Join(args, " "), err, out)
	}
	return nil
}
