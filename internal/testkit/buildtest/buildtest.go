// Package buildtest builds the repository's commands (idem-server,
// idem-check) for tests that run them as processes: each once per test run,
// into one temporary directory that the package's TestMain removes.
//
//	var bins = buildtest.New("idem-e2e-bin-")
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		bins.Remove()
//		os.Exit(code)
//	}
//
//	bin, err := bins.Build("idem-server", filepath.Join("..", "cmd", "idem-server"))
package buildtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Binaries is a set of commands built for one test run. Its methods are safe
// for concurrent use by parallel tests.
type Binaries struct {
	prefix string
	mu     sync.Mutex
	dir    string             // made at the first Build
	built  map[string]*result // by name
}

type result struct {
	once sync.Once
	bin  string
	err  error
}

// New returns an empty set whose temporary directory's name will start with
// prefix.
func New(prefix string) *Binaries {
	return &Binaries{prefix: prefix, built: map[string]*result{}}
}

// Build builds the main package in dir (relative to the test's working
// directory, the package's own; through the go.work workspace above it,
// where there is one) as the binary name, the first time name is asked for,
// and returns its path; later calls return the first call's path or error. The
// error holds go build's output.
func (b *Binaries) Build(name, dir string) (string, error) {
	b.mu.Lock()
	r, ok := b.built[name]
	if !ok {
		r = &result{}
		b.built[name] = r
	}
	b.mu.Unlock()
	r.once.Do(func() {
		var tmp string
		if tmp, r.err = b.tempDir(); r.err != nil {
			return
		}
		r.bin = filepath.Join(tmp, name)
		cmd := exec.Command("go", "build", "-o", r.bin, ".")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			r.bin, r.err = "", fmt.Errorf("go build %s: %v\n%s", dir, err, out)
		}
	})
	return r.bin, r.err
}

// Remove deletes the directory of the built binaries, if any.
func (b *Binaries) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
		b.dir = ""
	}
}

func (b *Binaries) tempDir() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" {
		dir, err := os.MkdirTemp("", b.prefix)
		if err != nil {
			return "", err
		}
		b.dir = dir
	}
	return b.dir, nil
}
