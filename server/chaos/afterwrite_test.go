package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// waitLimit bounds every wait of these tests for a server-side event.
const waitLimit = 10 * time.Second

// ledger counts the business writes of writer, per customer.
type ledger struct {
	mu    sync.Mutex
	count map[string]int
}

func (l *ledger) add(customer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == nil {
		l.count = map[string]int{}
	}
	l.count[customer]++
}

// Count returns how many writes customer had.
func (l *ledger) Count(customer string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[customer]
}

// writer is a handler that calls the injector's hooks around its business
// write (one write to l for the body's customer), as a protected handler does.
func writer(in *Injector, l *ledger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ Customer string }
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := in.BeforeWrite(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		l.add(p.Customer)
		in.AfterWrite(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"customer":"` + p.Customer + `"}`))
	})
}

// delayedServer serves POST /payments (protected by the middleware over a
// memory store, duplicates answered 409 at once) and POST
// /payments/unprotected, both wrapped by in, over a real connection, and
// reports, for each request that asked for Chaos-Delay-After-Write, whether
// its context had ended (the client hung up) by the time the handler returned.
func delayedServer(t *testing.T, in *Injector, l *ledger) (*httptest.Server, <-chan bool) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /payments", in.Wrap(server.Middleware(memstore.New(), server.WithInProgressWait(0))(writer(in, l))))
	mux.Handle("POST /payments/unprotected", in.Wrap(writer(in, l)))
	done := make(chan bool, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		if r.Header.Get(HeaderDelayAfterWrite) != "" {
			done <- r.Context().Err() != nil
		}
	}))
	t.Cleanup(srv.Close)
	return srv, done
}

// postPayment sends POST path to srv through c, with a key when key is not
// empty, and returns the answer read in full.
func postPayment(ctx context.Context, c *http.Client, url, key string, h http.Header) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"customer":"cus_slow","amount":1999,"currency":"EUR"}`))
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(server.HeaderKey, key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("no %s within %v", what, waitLimit)
		panic("unreachable")
	}
}

// TestDelayAfterWriteTimeoutDoubleCharges is the fault's point: a client whose
// time-out is shorter than the after-write delay gets a time-out, yet the
// payment stands, and its retry without a key charges a second time.
func TestDelayAfterWriteTimeoutDoubleCharges(t *testing.T) {
	t.Parallel()
	writes := &ledger{}
	srv, done := delayedServer(t, mustNew(t), writes)
	// The answer cannot come before the delay: the time-out always fires first.
	c := srv.Client()
	c.Timeout = 200 * time.Millisecond
	slow := http.Header{HeaderDelayAfterWrite: {"1s"}}

	_, _, err := postPayment(context.Background(), c, srv.URL+"/payments/unprotected", "", slow)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("first attempt: err = %v, want a time-out", err)
	}
	if resp, body, err := postPayment(context.Background(), srv.Client(), srv.URL+"/payments/unprotected", "", nil); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("retry: %v %s", err, body)
	}
	if hungUp := waitFor(t, done, "end of the delayed request"); !hungUp {
		t.Error("the delayed request's context had not ended: the client did not hang up")
	}
	if n := writes.Count("cus_slow"); n != 2 {
		t.Errorf("payments = %d, want 2 (the timed-out attempt's and the retry's)", n)
	}
}

// TestDelayAfterWriteKeyed holds a keyed request in its after-write delay:
// the client gives up, a retry with the same key is answered 409, and once the
// delay ends the response is recorded and replayed, with a single payment.
func TestDelayAfterWriteKeyed(t *testing.T) {
	t.Parallel()
	in := mustNew(t)
	entered, release := make(chan time.Duration, 1), make(chan struct{})
	in.cfg.sleep = func(d time.Duration) {
		entered <- d
		<-release
	}
	writes := &ledger{}
	srv, done := delayedServer(t, in, writes)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // runs before srv.Close, which waits for the handler
	url := srv.URL + "/payments"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstErr := make(chan error, 1)
	go func() {
		_, _, err := postPayment(ctx, srv.Client(), url, "k1", http.Header{HeaderDelayAfterWrite: {"1m"}})
		firstErr <- err
	}()
	if d := waitFor(t, entered, "after-write delay"); d != time.Minute {
		t.Fatalf("slept %v, want 1m", d)
	}
	if n := writes.Count("cus_slow"); n != 1 {
		t.Fatalf("payments during the delay = %d, want 1", n)
	}
	cancel() // the client gives up during the delay
	if err := waitFor(t, firstErr, "client error"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first attempt: err = %v, want context.Canceled", err)
	}

	resp, body, err := postPayment(context.Background(), srv.Client(), url, "k1", nil)
	if err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("retry during the delay: %v %v %s, want 409", err, resp, body)
	}
	var p server.Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Type != server.ProblemInProgress {
		t.Errorf("retry during the delay: problem %+v (%v), want %s", p, err, server.ProblemInProgress)
	}

	releaseOnce()
	waitFor(t, done, "end of the delayed request")
	resp, body, err = postPayment(context.Background(), srv.Client(), url, "k1", nil)
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get(server.HeaderReplayed) != "true" {
		t.Fatalf("retry after the delay: %v %v %s, want a replayed 201", err, resp, body)
	}
	if n := writes.Count("cus_slow"); n != 1 {
		t.Errorf("payments = %d, want 1", n)
	}
}
