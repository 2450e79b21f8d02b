package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// fileProxy writes a module proxy (GOPROXY=file://dir) serving the module
// path at each version, one package of the same name at its root.
func fileProxy(t *testing.T, path string, versions ...string) string {
	t.Helper()
	dir := t.TempDir()
	at := filepath.Join(dir, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	mod := "module " + path + "\n\ngo 1.26.0\n"
	for _, v := range versions {
		src := t.TempDir()
		for name, data := range map[string]string{"go.mod": mod, "x.go": "package x\n\nconst V = \"" + v + "\"\n"} {
			if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.Create(filepath.Join(at, v+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		if err := modzip.CreateFromDir(f, module.Version{Path: path, Version: v}, src); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{v + ".mod": mod, v + ".info": `{"Version":"` + v + `"}`} {
			if err := os.WriteFile(filepath.Join(at, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(at, "list"), []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sums returns the go.sum lines of path at versions, as fileProxy serves
// them.
func sums(t *testing.T, proxy, path string, versions ...string) string {
	t.Helper()
	var b strings.Builder
	for _, v := range versions {
		at := filepath.Join(proxy, filepath.FromSlash(path), "@v", v)
		h, err := dirhash.HashZip(at+".zip", dirhash.Hash1)
		if err != nil {
			t.Fatal(err)
		}
		mh, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return os.Open(at + ".mod") })
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s\n%s %s/go.mod %s\n", path, v, h, path, v, mh)
	}
	return b.String()
}

// A module that requires a dependency at a lower version than another
// module of the workspace builds its tests with the higher one, and a
// stranger with the lower: untested names it, and only it.
func TestUntested(t *testing.T) {
	proxy := fileProxy(t, "example.com/x", "v1.0.0", "v1.1.0")
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(proxy))
	t.Setenv("GOFLAGS", "")
	t.Setenv("GONOSUMDB", "example.com")
	t.Setenv("GOMODCACHE", t.TempDir())
	t.Setenv("GOWORK", "")
	t.Setenv("GOTOOLCHAIN", "local")
	imp := "\n\nimport _ \"example.com/x\"\n"
	root := gitRepo(t, map[string]string{
		"go.mod":      "module example.com/r\n\ngo 1.26.0\n\nrequire example.com/x v1.0.0\n",
		"r.go":        "package r" + imp,
		"go.work":     workFile,
		"sub/go.mod":  "module example.com/r/sub\n\ngo 1.26.0\n\nrequire (\n\texample.com/r v0.2.0\n\texample.com/x v1.1.0\n)\n",
		"sub/s.go":    "package sub" + imp,
		"go.work.sum": sums(t, proxy, "example.com/x", "v1.0.0", "v1.1.0"),
	})
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := drifts(context.Background(), r, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// Only the root: sub requires what the workspace builds.
	if len(ds) != 1 || ds[0].m.Dir != "." || ds[0].path != "example.com/x" || ds[0].required != "v1.0.0" || ds[0].tested != "v1.1.0" {
		t.Errorf("drifts = %+v, want one: . requires example.com/x v1.0.0, tested with v1.1.0", ds)
	}
}
