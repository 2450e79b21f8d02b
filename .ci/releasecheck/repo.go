package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// A gomod is one go.mod file of the repository: a module.
type gomod struct {
	Dir  string // slash-separated, relative to the repository root; "." for the root
	Path string // module path
	File *modfile.File
}

// A repo is the working tree as a commit would hold it: the tracked files and
// the untracked ones git does not ignore (build outputs are left out), with
// every module found in it.
type repo struct {
	Root    string   // absolute
	Files   []string // slash-separated, relative to Root, sorted; regular files that exist
	Modules []*gomod // sorted by Dir; the root module first
	Work    *modfile.WorkFile
}

// loadRepo reads the repository at root (a git working tree).
func loadRepo(root string) (*repo, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", root, err, stderr.Bytes())
	}
	r := &repo{Root: root}
	seen := map[string]bool{}
	for name := range strings.SplitSeq(string(out), "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted but still in the index, or a symlink: not part of a commit's modules
		}
		r.Files = append(r.Files, name)
	}
	sort.Strings(r.Files)
	for _, name := range r.Files {
		if path.Base(name) != "go.mod" || inTestdata(name) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s: no module line", name)
		}
		r.Modules = append(r.Modules, &gomod{Dir: path.Dir(name), Path: f.Module.Mod.Path, File: f})
	}
	slices.SortStableFunc(r.Modules, func(a, b *gomod) int { return compareDirs(a.Dir, b.Dir) })
	if len(r.Modules) == 0 || r.Modules[0].Dir != "." {
		return nil, fmt.Errorf("%s: no go.mod at the repository root", root)
	}
	if data, err := os.ReadFile(filepath.Join(root, "go.work")); err == nil {
		if r.Work, err = modfile.ParseWork("go.work", data, nil); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return r, nil
}

// compareDirs orders the root "." first, then by path.
func compareDirs(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == ".":
		return -1
	case b == ".":
		return 1
	}
	return strings.Compare(a, b)
}

// dotSlash is dir as go.work writes it: "./" for the root, else "./dir".
func dotSlash(dir string) string {
	if dir == "." {
		return "./"
	}
	return "./" + dir
}

// inTestdata reports whether name is inside a testdata directory, where a
// go.mod is test input, not a module of the repository.
func inTestdata(name string) bool {
	return slices.Contains(strings.Split(path.Dir(name), "/"), "testdata")
}

// rootPath is the root module's path: the prefix of every published module.
func (r *repo) rootPath() string { return r.Modules[0].Path }

// ours returns the modules published with the root: its path and the paths
// below it. A module elsewhere (the CI tool) is built but never published.
func (r *repo) ours() []*gomod {
	var ms []*gomod
	for _, m := range r.Modules {
		if isOurs(r.rootPath(), m.Path) {
			ms = append(ms, m)
		}
	}
	return ms
}

func isOurs(root, p string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// module returns our module with path p, or nil.
func (r *repo) module(p string) *gomod {
	for _, m := range r.ours() {
		if m.Path == p {
			return m
		}
	}
	return nil
}

// moduleFiles returns the files of the module in dir, relative to dir. Files
// of nested modules and vendor directories are still in the list: the zip
// writer leaves them out, as the go command does.
func (r *repo) moduleFiles(dir string) []string {
	if dir == "." {
		return slices.Clone(r.Files)
	}
	var files []string
	for _, f := range r.Files {
		if rel, ok := strings.CutPrefix(f, dir+"/"); ok {
			files = append(files, rel)
		}
	}
	return files
}

// libraries returns our modules that another of our modules requires: the
// ones a stranger puts in a go.mod of their own.
func (r *repo) libraries() []*gomod {
	required := map[string]bool{}
	for _, m := range r.Modules {
		for _, req := range m.File.Require {
			required[req.Mod.Path] = true
		}
	}
	var ms []*gomod
	for _, m := range r.ours() {
		if required[m.Path] {
			ms = append(ms, m)
		}
	}
	return ms
}

// releaseVersion is the version our modules require of each other, which the
// test proxy serves. Every such requirement must name the same version: the
// modules are released together. With no requirement at all, it is fallback.
func (r *repo) releaseVersion(fallback string) (string, error) {
	byVersion := map[string][]string{}
	for _, m := range r.Modules {
		for _, req := range m.File.Require {
			if isOurs(r.rootPath(), req.Mod.Path) {
				byVersion[req.Mod.Version] = append(byVersion[req.Mod.Version],
					fmt.Sprintf("%s/go.mod requires %s %s", m.Dir, req.Mod.Path, req.Mod.Version))
			}
		}
	}
	switch len(byVersion) {
	case 0:
		return fallback, checkVersion(r.rootPath(), fallback)
	case 1:
		for v, where := range byVersion {
			return v, checkVersion(r.rootPath(), v, where...)
		}
	}
	var all []string
	for _, where := range byVersion {
		all = append(all, where...)
	}
	sort.Strings(all)
	return "", fmt.Errorf("the modules are released together, so they must require one version of each other:\n\t%s",
		strings.Join(all, "\n\t"))
}

func checkVersion(p, v string, where ...string) error {
	if err := module.Check(p, v); err != nil || semver.Prerelease(v) != "" || module.IsPseudoVersion(v) {
		return fmt.Errorf("version %q (%s): want a release version such as v0.1.0", v, strings.Join(where, "; "))
	}
	return nil
}

// problems lists what would break a stranger's build or the workspace:
//   - a go.mod replacing one of our modules (go install refuses a module with
//     replace directives, and the workspace already covers local development);
//   - a requirement of one of our modules that is not in the repository;
//   - a module the workspace (go.work) does not use, or a use of no module;
//   - a module another one requires without a go.work replace "path version
//     => its own directory" at the release version, or such a replace at
//     another version or directory.
func (r *repo) problems(version string) []string {
	var ps []string
	for _, m := range r.Modules {
		for _, rep := range m.File.Replace {
			if isOurs(r.rootPath(), rep.Old.Path) {
				ps = append(ps, fmt.Sprintf("%s/go.mod: replace %s => %s: go.work covers local development, and go install refuses a module with replace directives",
					m.Dir, rep.Old.Path, rep.New.Path))
			}
		}
		for _, req := range m.File.Require {
			if isOurs(r.rootPath(), req.Mod.Path) && r.module(req.Mod.Path) == nil {
				ps = append(ps, fmt.Sprintf("%s/go.mod requires %s, which is not a module of this repository", m.Dir, req.Mod.Path))
			}
		}
	}
	if r.Work == nil {
		return append(ps, "no go.work at the repository root: every module must be in the workspace")
	}
	used := map[string]bool{}
	for _, u := range r.Work.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		used[dir] = true
		if !slices.ContainsFunc(r.Modules, func(m *gomod) bool { return m.Dir == dir }) {
			ps = append(ps, fmt.Sprintf("go.work: use %s: no go.mod there", u.Path))
		}
	}
	for _, m := range r.Modules {
		if !used[m.Dir] {
			ps = append(ps, fmt.Sprintf("go.work does not use %s: add it (go work use %s)", dotSlash(m.Dir), dotSlash(m.Dir)))
		}
	}
	replaced := map[string]bool{}
	for _, rep := range r.Work.Replace {
		m := r.module(rep.Old.Path)
		if m == nil {
			continue
		}
		if rep.Old.Version == version && rep.New.Version == "" && path.Clean(filepath.ToSlash(rep.New.Path)) == m.Dir {
			replaced[m.Path] = true
			continue
		}
		ps = append(ps, fmt.Sprintf("go.work: replace %s => %s: want %s %s => %s",
			strings.TrimSpace(rep.Old.Path+" "+rep.Old.Version), strings.TrimSpace(rep.New.Path+" "+rep.New.Version),
			m.Path, version, dotSlash(m.Dir)))
	}
	for _, m := range r.libraries() {
		if !replaced[m.Path] {
			ps = append(ps, fmt.Sprintf("go.work: no replace %s %s => %s (the workspace reads the go.mod of every required version, published or not)",
				m.Path, version, dotSlash(m.Dir)))
		}
	}
	return ps
}
