package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testkit/servicetest"
)

// privatePostgres is a PostgreSQL cluster of the test's own, which the test
// can freeze whole (SIGSTOP to the postmaster and every backend: connections
// stay up, nothing answers) and thaw.
type privatePostgres struct {
	cmd *exec.Cmd
	url string
}

// startPrivatePostgres serves a cluster of the test's own
// (servicetest.InitPostgres) on a private loopback port, with no Unix socket;
// it is stopped and removed when the test ends.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	cluster := servicetest.InitPostgres(t, "idem-server-pg-")
	_, port, _ := net.SplitHostPort(privateAddr(t))
	p := &privatePostgres{url: cluster.URL(port), cmd: cluster.Command(port, "-c", "max_connections=40")}
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

// frozenTimeout is the -request-timeout of the frozen-PostgreSQL test, and
// frozenSlack what the answer may take past it on a loaded machine: the
// store's last calls after the handler (its rollback) are bounded by the same
// deadline (docs/CONTRACT.md: PostgreSQL adds nothing to it), so the slack is
// only writing the answer; a rollback bounded by the store's finish time-out
// (5 s) instead would answer after 8 s.
const (
	frozenTimeout = 3 * time.Second
	frozenSlack   = 1500 * time.Millisecond
	// frozenDelay is how long the handler waits after the claim, before its
	// write: the time the test has to freeze PostgreSQL once it has seen
	// the claim (500 ms was not always enough on a loaded machine). It is
	// less than frozenTimeout, so the write meets the frozen server.
	frozenDelay = 2 * time.Second
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
		req.Header.Set("Chaos-Delay", frozenDelay.String()) // after the claim, before the business write
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
	if froze := time.Since(start); froze >= frozenDelay {
		// The handler may have written and committed before the freeze: the
		// test would prove nothing.
		t.Fatalf("PostgreSQL froze %v after the request, past the handler's delay of %v", froze, frozenDelay)
	}
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

// TestBinaryDefaultsNestUnderTheClientsCap: idem-server on its defaults,
// PostgreSQL frozen after the claim while the handler runs, and an idem client
// on its defaults. The server's request time ends inside the client's cap
// (docs/CONTRACT.md, the ladder), so its answer reaches the client before the
// client gives up, and the client can tell what happened. With a request time
// equal to the cap (30 s, before issue 37), the client's attempt was cut at
// the very instant the server answered: it returned with no status at all.
func TestBinaryDefaultsNestUnderTheClientsCap(t *testing.T) {
	t.Parallel()
	pg := startPrivatePostgres(t)
	const app = "idem_nest"
	p := startBinary(t, "-store", "postgres", "-postgres-url", withAppName(pg.url, app), "-chaos")
	start := time.Now()
	var heard, heardAfter atomic.Int64 // the first answer the client heard, and when
	client := idem.NewClient(idem.WithOnRetry(func(_ context.Context, next idem.AttemptInfo) {
		if next.Status != 0 && heard.CompareAndSwap(0, int64(next.Status)) {
			heardAfter.Store(int64(time.Since(start)))
		}
	}))
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/payments",
			strings.NewReader(`{"customer":"cus_nest","amount":1,"currency":"EUR"}`))
		req.Header.Set("Idempotency-Key", "nest-1")
		req.Header.Set("Chaos-Delay", frozenDelay.String()) // after the claim, before the business write
		resp, err := client.Do(req)
		done <- result{resp, err}
	}()
	waitInTransaction(t, pg.url, app, 1) // the claim is made: the handler runs
	pg.signal(syscall.SIGSTOP)
	if froze := time.Since(start); froze >= frozenDelay {
		t.Fatalf("PostgreSQL froze %v after the request, past the handler's delay of %v", froze, frozenDelay)
	}
	r := <-done
	pg.signal(syscall.SIGCONT)
	if r.resp != nil {
		_ = r.resp.Body.Close()
		heard.CompareAndSwap(0, int64(r.resp.StatusCode))
	}
	t.Logf("after %v: the client heard %d (at %v); it returned %v", time.Since(start).Round(time.Millisecond),
		heard.Load(), time.Duration(heardAfter.Load()).Round(time.Millisecond), r.err)
	if heard.Load() < 500 {
		t.Fatalf("a client on its defaults heard no answer from idem-server on its defaults (%v): the server's request time must end inside the client's cap of %v",
			r.err, idem.DefaultMaxElapsed)
	}
	var e *idem.Error
	if errors.As(r.err, &e) && e.LastStatus != int(heard.Load()) {
		t.Errorf("the client's error says last status %d, want the %d it heard", e.LastStatus, heard.Load())
	}
}
