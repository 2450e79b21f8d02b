package main

import (
	"archive/zip"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// gitRepo writes files (slash paths) into a new git working tree and adds
// those named in tracked to the index; the others stay untracked.
func gitRepo(t *testing.T, files map[string]string, untracked ...string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	for name := range files {
		if !slices.Contains(untracked, name) {
			git("add", "-f", name)
		}
	}
	return dir
}

const workFile = `go 1.26.0

use (
	.
	./sub
)

replace example.com/r v0.2.0 => ./
`

func TestWriteProxy(t *testing.T) {
	dir := gitRepo(t, map[string]string{
		"go.mod":                    "module example.com/r\n\ngo 1.26\n",
		"go.work":                   workFile,
		"a.go":                      "package r\n",
		".gitignore":                "*.bin\n",
		"build.bin":                 "an ignored build output",
		"new.go":                    "package r // untracked, not ignored: a commit would hold it\n",
		"sub/go.mod":                "module example.com/r/sub\n\ngo 1.26\n\nrequire example.com/r v0.2.0\n",
		"sub/s.go":                  "package sub\n",
		"vendor/modules.txt":        "# example.com/v v1.0.0\n",
		"vendor/example.com/v/v.go": "package v\n",
		"testdata/go.mod":           "module example.com/fixture\n",
	}, "new.go", "build.bin")
	r, err := loadRepo(dir)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range r.Modules {
		dirs = append(dirs, m.Dir+"="+m.Path)
	}
	if want := []string{".=example.com/r", "sub=example.com/r/sub"}; !slices.Equal(dirs, want) {
		t.Fatalf("modules %q, want %q (testdata/go.mod is no module)", dirs, want)
	}
	version, err := r.releaseVersion("v9.9.9")
	if err != nil || version != "v0.2.0" {
		t.Fatalf("releaseVersion = %q, %v; want v0.2.0 (what sub requires)", version, err)
	}

	proxy := t.TempDir()
	zips, err := writeProxy(r, proxy, version, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{
		"example.com/r":     {".gitignore", "a.go", "go.mod", "go.work", "new.go"},
		"example.com/r/sub": {"go.mod", "s.go"},
	} {
		mv := module.Version{Path: path, Version: "v0.2.0"}
		if _, err := modzip.CheckZip(mv, zips[path]); err != nil {
			t.Errorf("%s: the go command would refuse the zip: %v", path, err)
		}
		zr, err := zip.OpenReader(zips[path])
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range zr.File {
			got = append(got, f.Name)
		}
		zr.Close()
		slices.Sort(got)
		for i := range want {
			want[i] = path + "@v0.2.0/" + want[i]
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s zip holds %q, want %q", path, got, want)
		}
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(proxy, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got := read("example.com/r/sub/@v/v0.2.0.mod"); !strings.Contains(got, "require example.com/r v0.2.0") {
		t.Errorf("sub .mod = %q, want sub/go.mod", got)
	}
	if got := read("example.com/r/@v/list"); got != "v0.2.0\n" {
		t.Errorf("list = %q", got)
	}
	var info struct {
		Version string
		Time    time.Time
	}
	if err := json.Unmarshal([]byte(read("example.com/r/@v/v0.2.0.info")), &info); err != nil || info.Version != "v0.2.0" || info.Time.IsZero() {
		t.Errorf("info = %+v, %v", info, err)
	}
	if ps := r.problems(version); len(ps) > 0 {
		t.Errorf("problems of a sound repository: %q", ps)
	}
}

func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // substrings, one problem each
	}{
		{"replace in go.mod", map[string]string{
			"sub/go.mod": "module example.com/r/sub\n\nrequire example.com/r v0.2.0\n\nreplace example.com/r => ../\n",
		}, []string{"sub/go.mod: replace example.com/r => ../: go.work covers local development"}},
		{"module not in the workspace", map[string]string{
			"go.work": "go 1.26.0\n\nuse .\n\nreplace example.com/r v0.2.0 => ./\n",
		}, []string{"go.work does not use ./sub"}},
		{"use of no module", map[string]string{
			"go.work": workFile + "\nuse ./gone\n",
		}, []string{"go.work: use ./gone: no go.mod there"}},
		{"no workspace replace of a required module", map[string]string{
			"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./sub\n)\n",
		}, []string{"go.work: no replace example.com/r v0.2.0 => ./ (the workspace reads"}},
		{"workspace replace at another version", map[string]string{
			"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./sub\n)\n\nreplace example.com/r v0.1.0 => ./\n",
		}, []string{"go.work: replace example.com/r v0.1.0 => ./: want example.com/r v0.2.0 => ./", "go.work: no replace example.com/r v0.2.0"}},
		{"requirement of a module not in the repository", map[string]string{
			"sub/go.mod": "module example.com/r/sub\n\nrequire (\n\texample.com/r v0.2.0\n\texample.com/r/gone v0.2.0\n)\n",
		}, []string{"sub/go.mod requires example.com/r/gone, which is not a module of this repository"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{
				"go.mod":     "module example.com/r\n",
				"go.work":    workFile,
				"sub/go.mod": "module example.com/r/sub\n\nrequire example.com/r v0.2.0\n",
			}
			for k, v := range tc.files {
				files[k] = v
			}
			r, err := loadRepo(gitRepo(t, files))
			if err != nil {
				t.Fatal(err)
			}
			ps := r.problems("v0.2.0")
			if len(ps) != len(tc.want) {
				t.Fatalf("problems %q, want %d", ps, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(ps[i], w) {
					t.Errorf("problem %q, want it to contain %q", ps[i], w)
				}
			}
		})
	}
}

func TestReleaseVersion(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, bench string // go.mod requirement lines of cmd and bench
		want, wantErr    string
	}{
		{"one version", "example.com/r v0.3.0", "example.com/r/cmd v0.3.0", "v0.3.0", ""},
		{"no requirement of ours", "example.org/other v1.0.0", "", "v0.1.0", ""},
		{"two versions", "example.com/r v0.3.0", "example.com/r v0.2.0",
			"", "must require one version of each other:\n\tbench/go.mod requires example.com/r v0.2.0\n\tcmd/go.mod requires example.com/r v0.3.0"},
		{"pseudo-version", "example.com/r v0.0.0-20261130120000-0123456789ab", "", "", "want a release version"},
		{"prerelease", "example.com/r v0.3.0-rc.1", "", "", "want a release version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := func(line string) string {
				if line == "" {
					return ""
				}
				return "\nrequire " + line + "\n"
			}
			r, err := loadRepo(gitRepo(t, map[string]string{
				"go.mod":       "module example.com/r\n",
				"cmd/go.mod":   "module example.com/r/cmd\n" + req(tc.cmd),
				"bench/go.mod": "module example.com/r/bench\n" + req(tc.bench),
			}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.releaseVersion("v0.1.0")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("releaseVersion = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("releaseVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestSignificantChanges(t *testing.T) {
	diff := `go: downloading example.com/r v0.2.0
diff current/go.mod tidy/go.mod
--- current/go.mod
+++ tidy/go.mod
@@ -3,3 +3,3 @@
 require (
-	example.org/a v1.0.0 // indirect
+	example.org/a v1.0.0
 )
diff current/go.sum tidy/go.sum
--- current/go.sum
+++ tidy/go.sum
@@ -1,2 +1,4 @@
+example.com/r v0.2.0 h1:abc=
+example.com/r/sub v0.2.0/go.mod h1:def=
 example.org/a v1.0.0 h1:ghi=
-example.org/b v1.0.0/go.mod h1:jkl=
+example.com/rx v1.0.0/go.mod h1:mno=
`
	got := significantChanges(diff, "example.com/r")
	want := []string{
		"go.mod: -\texample.org/a v1.0.0 // indirect",
		"go.mod: +\texample.org/a v1.0.0",
		"go.sum: -example.org/b v1.0.0/go.mod h1:jkl=",
		"go.sum: +example.com/rx v1.0.0/go.mod h1:mno=",
	}
	if !slices.Equal(got, want) {
		t.Errorf("significantChanges =\n%q\nwant\n%q", got, want)
	}
	if got := significantChanges(diff[:strings.Index(diff, " example.org/a v1.0.0 h1")], "example.com/r"); len(got) != 2 {
		t.Errorf("only our own sums added to go.sum: %q, want only the go.mod changes", got)
	}
}

func TestDropOwnSums(t *testing.T) {
	name := filepath.Join(t.TempDir(), "go.sum")
	in := "example.com/r v0.2.0 h1:a=\nexample.com/r v0.2.0/go.mod h1:b=\nexample.com/r/sub v0.2.0 h1:c=\nexample.com/rx v1.0.0 h1:d=\nexample.org/a v1.0.0 h1:e=\n"
	if err := os.WriteFile(name, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dropOwnSums(name, "example.com/r"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(name)
	if want := "example.com/rx v1.0.0 h1:d=\nexample.org/a v1.0.0 h1:e=\n"; string(got) != want {
		t.Errorf("go.sum = %q, want %q", got, want)
	}
}

func TestProxyList(t *testing.T) {
	h := hostGoEnv{GOMODCACHE: "/home/u/go/pkg/mod", GOPROXY: "https://proxy.golang.org,direct"}
	if got, want := h.proxyList("/tmp/p"), "file:///tmp/p,file:///home/u/go/pkg/mod/cache/download,https://proxy.golang.org,direct"; got != want {
		t.Errorf("proxyList = %q, want %q", got, want)
	}
	h.GOPROXY = "off"
	if got, want := h.proxyList("/tmp/p"), "file:///tmp/p,file:///home/u/go/pkg/mod/cache/download"; got != want {
		t.Errorf("proxyList with GOPROXY=off = %q, want %q", got, want)
	}
}

// The test binary doubles as the server serveOnce starts: with the arguments
// releasecheck-fake-server MODE, TestMain runs fakeServer instead of the tests.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "releasecheck-fake-server" {
		fakeServer(os.Args[2])
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "releasecheck-fake-probe" {
		fakeProbe(os.Args[2], os.Args[3])
		return
	}
	os.Exit(m.Run())
}

// fakeServer listens on a free loopback port and, per mode: "ok" prints its
// URL, answers /healthz 200 and exits 0 on SIGTERM; "sick" answers 503;
// "silent" prints no URL; "stubborn" ignores SIGTERM.
func fakeServer(mode string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(4)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if mode != "silent" {
		fmt.Printf("fake listening on http://%s\n", ln.Addr())
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if mode == "sick" || r.URL.Path != "/healthz" {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
	}()
	for {
		<-term
		if mode != "stubborn" {
			os.Exit(0)
		}
	}
}

// fakeProbe exits 0 when mode is "pass" and url/healthz answers 200, 1
// otherwise.
func fakeProbe(url, mode string) {
	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK || mode != "pass" {
		fmt.Println("probe failed")
		os.Exit(1)
	}
	os.Exit(0)
}

func TestServeOnceProbe(t *testing.T) {
	t.Parallel()
	for mode, wantErr := range map[string]string{"pass": "", "fail": "probe failed"} {
		err := serveOnce(context.Background(), os.Args[0], serveSpec{Binary: "fake", Args: []string{"releasecheck-fake-server", "ok"},
			Health: "/healthz", StopWait: time.Minute, Probe: []string{os.Args[0], "releasecheck-fake-probe", "{URL}", mode}})
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("probe %s: %v", mode, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("probe %s: %v, want an error containing %q", mode, err, wantErr)
		}
	}
}

func TestServeOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, wantErr string
		stopWait      time.Duration
	}{
		{"ok", "", time.Minute},
		{"sick", "503 Service Unavailable, want 200", time.Minute},
		{"silent", "did not say where it listens", time.Minute},
		{"stubborn", "still running 1s after SIGTERM; killed", time.Second},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.mode == "silent" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
			}
			err := serveOnce(ctx, os.Args[0], serveSpec{Binary: "fake", Args: []string{"releasecheck-fake-server", tc.mode},
				Health: "/healthz", StopWait: tc.stopWait})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("serveOnce: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("serveOnce = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}
