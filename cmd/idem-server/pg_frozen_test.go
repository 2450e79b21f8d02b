package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/servicetest"
)

// privatePostgres is a PostgreSQL cluster of the test's own, which the test
// can freeze whole (SIGSTOP to the postmaster and every backend: connections
// stay up, nothing answers) and thaw.
type privatePostgres struct {
	cmd *exec.Cmd
	url string
}

// startPrivatePostgres initdb's a cluster in a temporary directory (as the
// postgres user when the test runs as root, which initdb refuses) and serves
// it on a private loopback port, with no Unix socket; it is stopped and
// removed when the test ends.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		servicetest.Unreachable(t, "PostgreSQL server binaries not found (%v): install postgresql", err)
	}
	cred, err := postgresCredential()
	if err != nil {
		servicetest.Unreachable(t, "cannot run initdb: %v", err)
	}
	base, err := os.MkdirTemp("", "idem-server-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	data := filepath.Join(base, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	attr := &syscall.SysProcAttr{}
	if cred != nil {
		attr.Credential = cred
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--no-sync", "--no-instructions")
	initdb.SysProcAttr, initdb.Env = &syscall.SysProcAttr{Credential: cred}, append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	_, port, _ := net.SplitHostPort(privateAddr(t))
	p := &privatePostgres{url: "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"}
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", port, "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "max_connections=40")
	p.cmd.SysProcAttr, p.cmd.Env = attr, append(os.Environ(), "LC_ALL=C")
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	t.Cleanup(func() {
		p.signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		_ = p.cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, p.url)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("private postgres on port %s did not come up: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the server to accept connections
	}
}

// signal sends sig to every process of the cluster: the postmaster and its
// children (each of which PostgreSQL puts in a process group of its own).
func (p *privatePostgres) signal(sig syscall.Signal) {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, sig)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		i := strings.LastIndexByte(string(b), ')')
		if fields := strings.Fields(string(b[i+1:])); i > 0 && len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			_ = syscall.Kill(child, sig)
		}
	}
}

// postgresBinDir returns the newest /usr/lib/postgresql/*/bin holding
// initdb, or the directory of initdb in PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", errors.New("no /usr/lib/postgresql/*/bin/initdb and no initdb in PATH")
	}
	return filepath.Dir(p), nil
}

// postgresCredential returns nil when the test does not run as root, and the
// postgres user's otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and there is no postgres user to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// frozenTimeout is the -request-timeout of the frozen-PostgreSQL test, and
// frozenSlack what the answer may take past it on a loaded machine: the
// store's last calls after the handler (its rollback) are bounded by the same
// deadline (docs/CONTRACT.md: PostgreSQL adds nothing to it), so the slack is
// only writing the answer; a rollback bounded by the store's finish time-out
// (5 s) instead would answer after 8 s.
const (
	frozenTimeout = 3 * time.Second
	frozenSlack   = 1500 * time.Millisecond
)

// TestBinaryFrozenPostgresAnswersWithinTheDeadline: PostgreSQL frozen (every
// process stopped, its connections kept) after the claim, while the handler
// runs: the request is answered within -request-timeout (and the store's
// own bound on its last calls), not when the client gives up (issue 27: 30 s
// without an answer); once PostgreSQL thaws, a retry with the same key makes
// the payment, and there is exactly one.
func TestBinaryFrozenPostgresAnswersWithinTheDeadline(t *testing.T) {
	t.Parallel()
	pg := startPrivatePostgres(t)
	const app = "idem_frozen"
	p := startBinary(t, "-store", "postgres", "-postgres-url", withAppName(pg.url, app), "-chaos",
		"-request-timeout", frozenTimeout.String())
	body := `{"customer":"cus_frozen","amount":1,"currency":"EUR"}`
	type answer struct {
		code  int
		after time.Duration
		err   error
	}
	answered := make(chan answer, 1)
	start := time.Now()
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "frozen-1")
		req.Header.Set("Chaos-Delay", "500ms") // after the claim, before the business write
		client := &http.Client{Timeout: 30 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			answered <- answer{0, time.Since(start), err}
			return
		}
		resp.Body.Close()
		answered <- answer{resp.StatusCode, time.Since(start), nil}
	}()
	waitInTransaction(t, pg.url, app, 1) // the claim is made: the handler runs
	pg.signal(syscall.SIGSTOP)
	a := <-answered
	pg.signal(syscall.SIGCONT)
	t.Logf("frozen after the claim: %d after %v (%v)", a.code, a.after, a.err)
	if a.err != nil || a.after > frozenTimeout+frozenSlack {
		t.Errorf("answer %d after %v (%v), want one within %v + %v", a.code, a.after, a.err, frozenTimeout, frozenSlack)
	}
	if a.code == http.StatusCreated {
		t.Errorf("a payment whose write met a frozen PostgreSQL answered 201")
	}

	// Thawed: the retry makes the payment (or replays it), once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, b := doRequest(t, http.MethodPost, p.url+"/payments", "frozen-1", body, nil)
		if resp.StatusCode == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) || resp.StatusCode == http.StatusInternalServerError {
			t.Fatalf("retry after the thaw: %d %s", resp.StatusCode, b)
		}
		time.Sleep(200 * time.Millisecond) // the retry a client makes after a 409 or a 503
	}
	if n := paymentsCount(t, p.url, "cus_frozen"); n != "1" {
		t.Errorf("payments after the freeze and the retry = %s, want exactly 1", n)
	}
}
