package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
)

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// freshClient opens a new connection per request, so that net/http does not
// silently resend a keyed request whose reused connection was dropped.
func freshClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// post sends POST path with body and headers (key set when not empty).
func post(ctx context.Context, c *http.Client, url, key, body string, h http.Header) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
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
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func mustPost(t *testing.T, c *http.Client, url, key, body string, h http.Header) reply {
	t.Helper()
	r, err := post(context.Background(), c, url, key, body, h)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return r
}

func get(t *testing.T, c *http.Client, url string) reply {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func payment(customer string) string {
	return `{"customer":"` + customer + `","amount":1250,"currency":"EUR"}`
}

func problemOf(t *testing.T, r reply) server.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var p server.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	srv := NewServer()
	defer srv.Close()
	c := srv.Client()

	first := mustPost(t, c, srv.URL+"/payments", "k1", payment("cus_a"), nil)
	if first.status != http.StatusCreated || first.header.Get(server.HeaderReplayed) != "" {
		t.Fatalf("first = %d %v", first.status, first.header)
	}
	replay := mustPost(t, c, srv.URL+"/payments", "k1", payment("cus_a"), nil)
	if replay.status != http.StatusCreated || replay.header.Get(server.HeaderReplayed) != "true" || !bytes.Equal(replay.body, first.body) ||
		replay.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay = %d %v %s, want the first response", replay.status, replay.header, replay.body)
	}
	if p := problemOf(t, mustPost(t, c, srv.URL+"/payments", "k1", payment("cus_other"), nil)); p.Status != http.StatusUnprocessableEntity {
		t.Errorf("other body, same key: %+v", p)
	}
	if p := problemOf(t, mustPost(t, c, srv.URL+"/payments", "", payment("cus_a"), nil)); p.Type != server.ProblemMissingKey {
		t.Errorf("no key: %+v", p)
	}
	// Scopes: another bearer token with the same key is another operation.
	bob := http.Header{"Authorization": {"Bearer bob-token"}}
	if r := mustPost(t, c, srv.URL+"/payments", "k1", payment("cus_a"), bob); r.status != http.StatusCreated || r.header.Get(server.HeaderReplayed) != "" {
		t.Errorf("other scope: %d %v", r.status, r.header)
	}
	// The unprotected route charges on every call.
	for range 2 {
		if r := mustPost(t, c, srv.URL+"/payments/unprotected", "k2", payment("cus_b"), nil); r.status != http.StatusCreated {
			t.Fatalf("unprotected: %d %s", r.status, r.body)
		}
	}
	if got, want := [3]int{srv.Payments("cus_a"), srv.Payments("cus_b"), srv.Payments("")}, [3]int{2, 2, 4}; got != want {
		t.Errorf("payments a, b, all = %v, want %v", got, want)
	}
	var list payments.ListResponse
	if r := get(t, c, srv.URL+"/payments?customer=cus_b"); r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || list.Count != 2 {
		t.Errorf("GET /payments?customer=cus_b = %d %s", r.status, r.body)
	}
	if r := get(t, c, srv.URL+"/healthz"); r.status != http.StatusOK || string(r.body) != "ok\n" {
		t.Errorf("healthz = %d %q", r.status, r.body)
	}
	if srv.Payments("") != 4 || srv.Store() == nil {
		t.Error("Payments or Store accessor")
	}
	var ids []string
	for _, p := range list.Payments {
		ids = append(ids, p.ID)
	}
	if got := srv.PaymentIDs("cus_b"); len(got) != 2 || len(ids) != 2 || got[0] != ids[0] || got[1] != ids[1] {
		t.Errorf("PaymentIDs(cus_b) = %v, want the IDs GET /payments lists, %v", got, ids)
	}
}

// TestDrop: the payment is made and recorded, the client sees the connection
// close, and its retry with the same key gets the recorded response.
func TestDrop(t *testing.T) {
	t.Parallel()
	srv := NewServer()
	defer srv.Close()
	c := freshClient()
	_, err := post(context.Background(), c, srv.URL+"/payments", "drop-1", payment("cus_d"), http.Header{chaos.HeaderDrop: {chaos.DropAfterRecord}})
	if !errors.Is(err, io.EOF) {
		t.Fatalf("dropped POST: err = %v, want EOF", err)
	}
	if n := srv.Payments("cus_d"); n != 1 {
		t.Fatalf("payments after drop = %d, want 1", n)
	}
	r := mustPost(t, c, srv.URL+"/payments", "drop-1", payment("cus_d"), nil)
	if r.status != http.StatusCreated || r.header.Get(server.HeaderReplayed) != "true" {
		t.Fatalf("retry = %d %v, want the replay", r.status, r.header)
	}
	if n := srv.Payments("cus_d"); n != 1 {
		t.Errorf("payments after retry = %d, want 1", n)
	}
}

// TestCrash: the handler dies after the business write; the key is released, so
// on the memory store the retry charges again (the documented crash window).
func TestCrash(t *testing.T) {
	t.Parallel()
	srv := NewServer()
	defer srv.Close()
	c := freshClient()
	_, err := post(context.Background(), c, srv.URL+"/payments", "crash-1", payment("cus_c"), http.Header{chaos.HeaderCrash: {chaos.CrashAfterWrite}})
	if !errors.Is(err, io.EOF) {
		t.Fatalf("crashed POST: err = %v, want EOF", err)
	}
	if n := srv.Payments("cus_c"); n != 1 {
		t.Fatalf("payments after crash = %d, want 1", n)
	}
	r := mustPost(t, c, srv.URL+"/payments", "crash-1", payment("cus_c"), nil)
	if r.status != http.StatusCreated || r.header.Get(server.HeaderReplayed) != "" {
		t.Fatalf("retry = %d %v, want a new execution (key released)", r.status, r.header)
	}
	if n := srv.Payments("cus_c"); n != 2 {
		t.Errorf("payments = %d, want 2: memory store crash window", n)
	}
}

func TestFail(t *testing.T) {
	t.Parallel()
	srv := NewServer()
	defer srv.Close()
	c := srv.Client()
	h := http.Header{chaos.HeaderFail: {"503"}, chaos.HeaderRetryAfter: {"1"}}
	r := mustPost(t, c, srv.URL+"/payments", "fail-1", payment("cus_f"), h)
	if p := problemOf(t, r); r.status != http.StatusServiceUnavailable || p.Type != chaos.ProblemInjected || r.header.Get("Retry-After") != "1" {
		t.Fatalf("failed POST = %d %v %+v", r.status, r.header, p)
	}
	if n := srv.Payments("cus_f"); n != 0 {
		t.Fatalf("payments after fail = %d, want 0", n)
	}
	r = mustPost(t, c, srv.URL+"/payments", "fail-1", payment("cus_f"), nil)
	if r.status != http.StatusCreated || r.header.Get(server.HeaderReplayed) != "" || srv.Payments("cus_f") != 1 {
		t.Fatalf("retry = %d %v, payments %d", r.status, r.header, srv.Payments("cus_f"))
	}
}

func TestBadChaosHeader(t *testing.T) {
	t.Parallel()
	srv := NewServer()
	defer srv.Close()
	for _, path := range []string{"/payments", "/payments/unprotected"} {
		r := mustPost(t, srv.Client(), srv.URL+path, "bad-1", payment("cus_x"), http.Header{chaos.HeaderFail: {"lots"}})
		if p := problemOf(t, r); r.status != http.StatusBadRequest || p.Type != chaos.ProblemBadHeader || !strings.Contains(p.Detail, chaos.HeaderFail) {
			t.Errorf("%s: %d %+v", path, r.status, p)
		}
	}
	if n := srv.Payments(""); n != 0 {
		t.Errorf("payments = %d", n)
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	srv := NewServer()
	defer srv.Close()
	start := time.Now()
	r := mustPost(t, srv.Client(), srv.URL+"/payments", "delay-1", payment("cus_w"), http.Header{chaos.HeaderDelay: {"50ms"}})
	if elapsed := time.Since(start); r.status != http.StatusCreated || elapsed < 50*time.Millisecond {
		t.Errorf("delayed POST = %d after %v, want 201 after at least 50ms", r.status, elapsed)
	}
}

// spyStore reports when the first handler starts running and when the first
// execution's Do returns.
type spyStore struct {
	server.Store
	start   sync.Once
	finish  sync.Once
	started chan struct{}
	done    chan struct{}
}

func (s *spyStore) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	res, err := s.Store.Do(ctx, req, func(ctx context.Context) (*server.Response, bool) {
		s.start.Do(func() { close(s.started) })
		return run(ctx)
	})
	if res.Outcome == server.OutcomeExecuted {
		s.finish.Do(func() { close(s.done) })
	}
	return res, err
}

// TestDelayHoldsTheClaim: while the first request is delayed, a duplicate gets
// 409 with Retry-After; when the first client goes away the delay ends, nothing
// is charged, the key is released and a retry runs.
func TestDelayHoldsTheClaim(t *testing.T) {
	t.Parallel()
	spy := &spyStore{Store: memstore.New(), started: make(chan struct{}), done: make(chan struct{})}
	srv := NewServer(WithStore(spy))
	defer srv.Close()
	c := srv.Client()

	ctx, cancel := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := post(ctx, c, srv.URL+"/payments", "slow-1", payment("cus_s"), http.Header{chaos.HeaderDelay: {"1m"}})
		firstErr <- err
	}()
	<-spy.started
	dup := mustPost(t, c, srv.URL+"/payments", "slow-1", payment("cus_s"), nil)
	if p := problemOf(t, dup); dup.status != http.StatusConflict || p.Type != server.ProblemInProgress {
		t.Fatalf("duplicate = %d %+v", dup.status, p)
	}
	if ra, err := strconv.Atoi(dup.header.Get("Retry-After")); err != nil || ra < 1 || ra > 30 {
		t.Errorf("Retry-After = %q, want 1 to 30 seconds (the lock TTL)", dup.header.Get("Retry-After"))
	}
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("first request: err = %v", err)
	}
	<-spy.done // the server saw the disconnect, ended the delay and released the key
	r := mustPost(t, c, srv.URL+"/payments", "slow-1", payment("cus_s"), nil)
	if r.status != http.StatusCreated || r.header.Get(server.HeaderReplayed) != "" || srv.Payments("cus_s") != 1 {
		t.Errorf("retry = %d %v, payments %d; want one new execution", r.status, r.header, srv.Payments("cus_s"))
	}
}

// TestSoakRandomFaults retries each of 60 operations (one key each) through
// random fails, drops and delays until it succeeds: each charges exactly once.
func TestSoakRandomFaults(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 7))
	random := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
	srv := NewServer(WithChaos(chaos.WithFailRate(0.3), chaos.WithDropRate(0.3), chaos.WithDelayMax(2*time.Millisecond), chaos.WithRand(random)))
	defer srv.Close()
	c := freshClient()
	const ops = 60
	faults := 0
	for i := range ops {
		key := "soak-" + strconv.Itoa(i)
		for attempt := 0; ; attempt++ {
			if attempt == 50 {
				t.Fatalf("%s: no success in 50 attempts", key)
			}
			r, err := post(context.Background(), c, srv.URL+"/payments", key, payment("cus_soak"), nil)
			if err == nil && r.status == http.StatusCreated {
				break
			}
			if err == nil && r.status != http.StatusServiceUnavailable {
				t.Fatalf("%s: unexpected %d %s", key, r.status, r.body)
			}
			faults++
		}
	}
	if n := srv.Payments("cus_soak"); n != ops {
		t.Errorf("payments = %d, want %d", n, ops)
	}
	if faults == 0 {
		t.Error("no fault was injected")
	}
}

func TestNewServerPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"nil store", func() { WithStore(nil) }, "idemtest: WithStore(nil): want a server.Store"},
		{"bad chaos option", func() { NewServer(WithChaos(chaos.WithFailRate(2))).Close() }, "chaos: WithFailRate(2): want 0 <= p <= 1"},
		{"nil chaos option", func() { NewServer(WithChaos(nil)).Close() }, "chaos: New(nil Option): want an Option"},
		{"bad middleware option", func() { NewServer(WithMiddlewareOptions(server.WithTTL(0))).Close() }, "server: WithTTL(0s): want a positive duration"},
		{"nil middleware option", func() { NewServer(WithMiddlewareOptions(nil)).Close() }, "server: Middleware(nil Option): want an Option"},
		{"nil option", func() { NewServer(nil).Close() }, "idemtest: NewServer(nil Option): want an Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if r := recover(); r != tt.want {
					t.Errorf("panic %#v, want %q", r, tt.want)
				}
			}()
			tt.f()
		})
	}
}

// TestDelayAfterWrite: a client whose time-out is shorter than
// Chaos-Delay-After-Write gets a time-out although the payment was made. On
// the unprotected route its retry charges again; on /payments a retry during
// the delay gets 409 and, once the first response is recorded, the replay.
func TestDelayAfterWrite(t *testing.T) {
	t.Parallel()
	slow := http.Header{chaos.HeaderDelayAfterWrite: {"1s"}}
	// The answer cannot come before the delay: the time-out always fires first.
	timedOut := func(t *testing.T, srv *Server, route, key, customer string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := post(ctx, srv.Client(), srv.URL+route, key, payment(customer), slow); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first attempt: err = %v, want a time-out", err)
		}
	}

	t.Run("unprotected", func(t *testing.T) {
		t.Parallel()
		srv := NewServer()
		defer srv.Close()
		timedOut(t, srv, "/payments/unprotected", "", "cus_t")
		if r := mustPost(t, srv.Client(), srv.URL+"/payments/unprotected", "", payment("cus_t"), nil); r.status != http.StatusCreated {
			t.Fatalf("retry = %d %s", r.status, r.body)
		}
		// The timed-out attempt's write lands whether or not it came first.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(10 * time.Second)
		for srv.Payments("cus_t") < 2 {
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("payments = %d after 10s, want 2", srv.Payments("cus_t"))
			}
		}
	})

	t.Run("keyed", func(t *testing.T) {
		t.Parallel()
		spy := &spyStore{Store: memstore.New(), started: make(chan struct{}), done: make(chan struct{})}
		srv := NewServer(WithStore(spy))
		defer srv.Close()
		timedOut(t, srv, "/payments", "late-1", "cus_k")
		<-spy.started // the first attempt holds the claim for the rest of its delay
		// The retry during the delay waits for the first (5 s by default, the
		// delay is 1 s) and gets its replay: the answer, not a 409.
		r := mustPost(t, srv.Client(), srv.URL+"/payments", "late-1", payment("cus_k"), nil)
		if r.status != http.StatusCreated || r.header.Get(server.HeaderReplayed) != "true" || srv.Payments("cus_k") != 1 {
			t.Errorf("retry during the delay = %d %v, payments %d; want the replay and one payment", r.status, r.header, srv.Payments("cus_k"))
		}
		<-spy.done
	})
}
