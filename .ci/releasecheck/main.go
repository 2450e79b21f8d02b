// Command releasecheck checks idem's modules the way a stranger gets them,
// from a module proxy, without the repository around them. It finds the
// modules itself (every go.mod that git would commit), so a new module is
// checked without a change here.
//
// Usage (run by .ci/release-check, make release-check, make tidy-check):
//
//	releasecheck [flags] [check]     the release check (default)
//	releasecheck [flags] tidy        go mod tidy -diff of every module, GOWORK=off
//	releasecheck [flags] tidy -w     make every module tidy
//	releasecheck [flags] proxy DIR   only write the test proxy to DIR
//
// The test version is the one the modules require of each other (they must
// agree). The test proxy serves every module of the repository under the root
// module's path at that version, made from the working tree; everything else
// comes from the machine's module cache and GOPROXY, checked as usual.
//
// Releasing vX.Y.Z: set every requirement of one of our modules and every
// go.work replace to vX.Y.Z (go mod edit -require, go work edit -replace),
// make tidy, make release-check, commit, then tag that commit once per module
// that another requires or a stranger installs: vX.Y.Z for the root and
// DIR/vX.Y.Z for the others (server/pgstore/vX.Y.Z, cmd/idem-server/vX.Y.Z, ...).
// The go.sum files never hold our own modules' checksums; go fetches them, and
// the public checksum database checks them once the tags are published.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("release-check: ")
	repoDir := flag.String("repo", "", "repository root (default: the git top level of the working directory)")
	fallback := flag.String("version", "v0.1.0", "test version when no module requires another")
	keep := flag.Bool("keep", false, "keep the temporary directory (proxy, GOPATH, extracted modules)")
	// On a fresh machine, with CI's other checks at once, the check took
	// 19 min 47 s (go vet of the root module 229 s, of bench 498 s, with an
	// empty build cache): 20 minutes leave no margin. 23 stays within CI's 25.
	timeout := flag.Duration("timeout", 23*time.Minute, "give up after this long")
	serveArgs := flag.String("serve", "idem-server -addr 127.0.0.1:0 -store memory", "installed command to start, and its arguments")
	health := flag.String("health", "/healthz", "path the started command answers 200 on")
	probe := flag.Bool("probe", true, "run the installed idem-check against the started command's POST /payments; it must pass")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: releasecheck [flags] [check | tidy [-w] | proxy DIR]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var probeArgs []string
	if *probe {
		probeArgs = idemCheckProbe
	}
	if err := run(ctx, *repoDir, *fallback, *keep, strings.Fields(*serveArgs), *health, probeArgs, flag.Args()); err != nil {
		log.Print(err)
		cancel()
		stop()
		os.Exit(1)
	}
}

// idemCheckProbe is the installed idem-check run against the started
// idem-server: a stranger's two commands working together.
var idemCheckProbe = []string{"idem-check", "-url", "{URL}/payments",
	"-body", `{"customer":"cus_release","amount":100,"currency":"EUR"}`,
	"-H", "Authorization: Bearer release-check", "-H", "Content-Type: application/json"}

func run(ctx context.Context, repoDir, fallback string, keep bool, serve []string, health string, probe []string, args []string) (err error) {
	start := time.Now()
	cmd := "check"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	write := false
	switch {
	case cmd == "check" && len(args) == 0 && len(serve) > 0:
	case cmd == "tidy" && len(args) == 0:
	case cmd == "tidy" && len(args) == 1 && args[0] == "-w":
		write = true
	case cmd == "proxy" && len(args) == 1:
	default:
		return fmt.Errorf("bad arguments %q; run releasecheck -h", append([]string{cmd}, args...))
	}

	if repoDir == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("not in a git working tree (or set -repo): %w", err)
		}
		repoDir = strings.TrimSpace(string(out))
	}
	r, err := loadRepo(repoDir)
	if err != nil {
		return err
	}
	version, err := r.releaseVersion(fallback)
	if err != nil {
		return err
	}
	if cmd == "proxy" {
		_, err := writeProxy(r, args[0], version, time.Now())
		return err
	}
	if ps := r.problems(version); len(ps) > 0 {
		return fmt.Errorf("the modules are not set up for release:\n\t%s", strings.Join(ps, "\n\t"))
	}
	host, err := readHostGoEnv(ctx)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "idem-release-check-")
	if err != nil {
		return err
	}
	if keep {
		log.Printf("keeping %s", tmp)
	} else {
		defer func() {
			if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	logf := func(format string, a ...any) { log.Printf(format, a...) }
	switch cmd {
	case "tidy":
		err = tidy(ctx, r, host, tmp, version, write, logf)
	default:
		err = releaseCheck(ctx, r, host, tmp, version, serveSpec{Binary: serve[0], Args: serve[1:], Health: health, StopWait: 15 * time.Second, Probe: probe}, logf)
	}
	if err == nil {
		log.Printf("ok: %s of %d modules at %s in %.0fs", cmd, len(r.Modules), version, time.Since(start).Seconds())
	}
	return err
}

// lockedBuffer is a bytes.Buffer safe for a writing process and a reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
