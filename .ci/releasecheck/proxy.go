package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// writeProxy writes a module proxy in the GOPROXY file layout to dir: for each
// of our modules at version, @v/list, @v/<version>.info, .mod and .zip, the
// zip holding the module's files as the go command would (the module path and
// version as prefix; nested modules, vendor directories and irregular files
// left out). It returns the zip of each module path.
func writeProxy(r *repo, dir, version string, at time.Time) (map[string]string, error) {
	zips := map[string]string{}
	for _, m := range r.ours() {
		escaped, err := module.EscapePath(m.Path)
		if err != nil {
			return nil, err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, at.UTC()})
		if err != nil {
			return nil, err
		}
		gomod, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(m.Dir), "go.mod"))
		if err != nil {
			return nil, err
		}
		for name, data := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": gomod} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return nil, err
			}
		}
		zipPath := filepath.Join(vdir, version+".zip")
		if err := writeZip(zipPath, module.Version{Path: m.Path, Version: version},
			filepath.Join(r.Root, filepath.FromSlash(m.Dir)), r.moduleFiles(m.Dir)); err != nil {
			return nil, err
		}
		zips[m.Path] = zipPath
	}
	return zips, nil
}

func writeZip(name string, mv module.Version, dir string, files []string) (err error) {
	zf := make([]modzip.File, len(files))
	for i, f := range files {
		zf[i] = diskFile{dir: dir, rel: f}
	}
	out, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if err := modzip.Create(out, mv, zf); err != nil {
		return fmt.Errorf("%s@%s: %w", mv.Path, mv.Version, err)
	}
	return nil
}

// diskFile is a file of the working tree, as modzip.Create wants it.
type diskFile struct{ dir, rel string }

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs()) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.abs()) }
func (f diskFile) abs() string                  { return filepath.Join(f.dir, filepath.FromSlash(f.rel)) }

// fileURL is dir as a GOPROXY entry.
func fileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}
