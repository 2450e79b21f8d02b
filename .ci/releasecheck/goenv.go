package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// goEnv runs the go command as a stranger outside the repository would: no
// workspace, an empty GOPATH and module cache of its own, our modules from the
// test proxy and nothing else from the repository.
type goEnv struct {
	env  []string
	base string // directories under base are logged relative to it
	logf func(format string, args ...any)
}

// hostGoEnv is what the go command of this machine is configured with; the
// stranger's environment is derived from it.
type hostGoEnv struct {
	GOCACHE, GOMODCACHE, GOPROXY, GOSUMDB string
}

func readHostGoEnv(ctx context.Context) (hostGoEnv, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOCACHE", "GOMODCACHE", "GOPROXY", "GOSUMDB").Output()
	if err != nil {
		return hostGoEnv{}, fmt.Errorf("go env: %w", err)
	}
	v := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(v) != 4 {
		return hostGoEnv{}, fmt.Errorf("go env: unexpected output %q", out)
	}
	return hostGoEnv{GOCACHE: v[0], GOMODCACHE: v[1], GOPROXY: v[2], GOSUMDB: v[3]}, nil
}

// proxyList is the GOPROXY of the stranger: the test proxy for our modules,
// then the host's module cache (itself in proxy layout, so third-party modules
// already downloaded are not fetched again), then the host's proxies. A module
// missing from one falls through to the next; third-party modules are still
// verified against go.sum and the checksum database.
func (h hostGoEnv) proxyList(testProxy string) string {
	list := []string{fileURL(testProxy)}
	if h.GOMODCACHE != "" {
		list = append(list, fileURL(filepath.Join(h.GOMODCACHE, "cache", "download")))
	}
	if h.GOPROXY != "" && h.GOPROXY != "off" {
		list = append(list, h.GOPROXY)
	}
	return strings.Join(list, ",")
}

// strangerEnv returns the environment of a go command with gopath as GOPATH
// (and module cache), GOWORK=off, GOFLAGS=goflags and our modules (rootPath
// and below) from testProxy, not checked against the public checksum
// database, which has never seen them. The build cache is the host's: it is
// content-addressed, and -trimpath keeps its entries independent of where the
// module cache is.
func strangerEnv(h hostGoEnv, gopath, testProxy, rootPath, goflags string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "GO") || name == "CGO_ENABLED" {
			continue // nothing of the host's go configuration but what is set below
		}
		env = append(env, kv)
	}
	return append(env,
		"GOENV=off",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOFLAGS="+goflags,
		"GOPATH="+gopath,
		"GOMODCACHE="+filepath.Join(gopath, "pkg", "mod"),
		"GOBIN="+filepath.Join(gopath, "bin"),
		"GOCACHE="+h.GOCACHE,
		"GOPROXY="+h.proxyList(testProxy),
		"GOSUMDB="+h.GOSUMDB,
		"GONOSUMDB="+rootPath,
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOINSECURE=",
	)
}

// run runs go with args in dir and returns its combined output; the error
// holds the output.
func (e *goEnv) run(ctx context.Context, dir string, args ...string) (string, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = e.env
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	where := dir
	if rel, err := filepath.Rel(e.base, dir); e.base != "" && err == nil && !strings.HasPrefix(rel, "..") {
		where = rel
	}
	e.logf("   go %s (in %s, %.1fs)", strings.Join(args, " "), where, time.Since(start).Seconds())
	if err != nil {
		return out.String(), fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out.Bytes())
	}
	return out.String(), nil
}
