// Package adaptertest is the suite a framework adapter of idem's server
// (server/ginidem, server/echoidem) passes: the store contract's scenarios
// that make sense through a framework, played over a real HTTP server in
// front of a service written with the framework's own idioms, and the idem
// client retrying through a proxy that loses responses.
//
// The service under test (Build) routes POST /ops/:op, protected by the
// adapter, to a handler that:
//
//  1. calls Ledger.Enter(op);
//  2. decodes {"amount": n} and, when n <= 0, refuses with 422 through the
//     framework's refusal idiom (gin: c.AbortWithStatusJSON; echo: a returned
//     echo.NewHTTPError);
//  3. calls Ledger.Charge(op, n); on an error answers 503 through the
//     framework's error path (gin: c.Error, answered by an error-handling
//     middleware registered in front of the adapter; echo: a returned
//     *echo.HTTPError answered by the HTTPErrorHandler); Charge may panic,
//     which the framework's recovery middleware, in front of the adapter,
//     answers;
//  4. declares the effect (the adapter's DeclareEffect);
//  5. calls Ledger.After(op); on an error answers 500;
//  6. answers 201 with the Charge as JSON and Location /ops/:op/:id.
package adaptertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// waitLimit bounds every wait, so a broken adapter fails instead of hanging.
const waitLimit = 15 * time.Second

// Build returns the service under test: the framework's router, with the
// adapter built over store and opts, and the handler described in the
// package documentation over l.
type Build func(t *testing.T, store server.Store, l *Ledger, opts ...server.Option) http.Handler

type scenario struct {
	name string
	run  func(t *testing.T, e *env)
	opts []server.Option
}

var scenarios = []scenario{
	{name: "replay_byte_exact", run: testReplay},
	{name: "mismatch_422", run: testMismatch},
	{name: "refusal_not_recorded", run: testRefusal},
	{name: "concurrent_duplicates_one_run", run: testConcurrent},
	{name: "error_path_5xx_released", run: testErrorPath},
	{name: "panic_released", run: testPanic},
	{name: "declared_effect_then_500_recorded", run: testDeclared},
	{name: "scopes", run: testScopes, opts: []server.Option{server.WithScope(server.BearerScope)}},
	{name: "client_through_lossy_proxy", run: testLossy},
}

// Run runs every scenario against a fresh service from build, each on a
// memstore of its own.
func Run(t *testing.T, build Build) {
	t.Helper()
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, build, s.opts...)
			s.run(t, e)
		})
	}
}

// env is one scenario's world: the ledger, the counted store, the service
// on an httptest server, and a plain client.
type env struct {
	t      *testing.T
	ledger *Ledger
	store  *countingStore
	srv    *httptest.Server
	client *http.Client
	op     string
}

func newEnv(t *testing.T, build Build, opts ...server.Option) *env {
	e := &env{t: t, ledger: NewLedger(), store: newCountingStore(memstore.New()), op: "op" + randomHex(6)}
	e.srv = httptest.NewServer(build(t, e.store, e.ledger, opts...))
	t.Cleanup(e.srv.Close)
	e.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * waitLimit}
	return e
}

// reply is a response read whole, or the attempt's error.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

func (r reply) replayed() bool { return r.Header.Get(server.HeaderReplayed) == "true" }

func (r reply) String() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("%d replayed=%v %s", r.Status, r.replayed(), bytes.TrimSpace(r.Body))
}

// post sends POST /ops/<op> with the key (none when empty) and bearer token
// (none when empty).
func (e *env) post(key, body, bearer string) reply {
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/ops/"+e.op, strings.NewReader(body))
	if err != nil {
		return reply{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(server.HeaderKey, key)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

func amount(n int) string { return fmt.Sprintf(`{"amount":%d}`, n) }

// want checks the ledger: how often the handler ran and charged.
func (e *env) want(entered, charged int) {
	e.t.Helper()
	if got := e.ledger.Entered(e.op); got != entered {
		e.t.Errorf("the handler ran %d times, want %d", got, entered)
	}
	if got := len(e.ledger.Charges(e.op)); got != charged {
		e.t.Errorf("%d charges, want %d", got, charged)
	}
}

func wantStatus(t *testing.T, r reply, status int, replayed bool, what string) {
	t.Helper()
	if r.Err != nil || r.Status != status || r.replayed() != replayed {
		t.Fatalf("%s: got %v, want %d replayed=%v", what, r, status, replayed)
	}
}

// wantReplayOf checks that r is first, byte for byte, replayed.
func wantReplayOf(t *testing.T, r, first reply, what string) {
	t.Helper()
	wantStatus(t, r, first.Status, true, what)
	if !bytes.Equal(r.Body, first.Body) {
		t.Errorf("%s: body %q, want the first answer's %q byte for byte", what, r.Body, first.Body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if r.Header.Get(h) != first.Header.Get(h) {
			t.Errorf("%s: %s %q, want %q", what, h, r.Header.Get(h), first.Header.Get(h))
		}
	}
}

func testReplay(t *testing.T, e *env) {
	first := e.post("k1", amount(5), "")
	wantStatus(t, first, http.StatusCreated, false, "first request")
	if first.Header.Get("Location") == "" || !strings.Contains(first.Header.Get("Content-Type"), "json") {
		t.Errorf("first request: headers %v, want a Location and a JSON Content-Type", first.Header)
	}
	for i := range 2 {
		wantReplayOf(t, e.post("k1", amount(5), ""), first, fmt.Sprintf("retry %d", i+1))
	}
	e.want(1, 1)
}

func testMismatch(t *testing.T, e *env) {
	wantStatus(t, e.post("k1", amount(5), ""), http.StatusCreated, false, "first request")
	r := e.post("k1", amount(6), "")
	wantStatus(t, r, http.StatusUnprocessableEntity, false, "same key, other body")
	if !bytes.Contains(r.Body, []byte(server.ProblemMismatch)) {
		t.Errorf("same key, other body: %s is not the key-reused problem", r.Body)
	}
	e.want(1, 1)
}

// testRefusal: the handler's own 422 is a refusal: not recorded, so the same
// key with a corrected body runs.
func testRefusal(t *testing.T, e *env) {
	first := e.post("k1", amount(-1), "")
	wantStatus(t, first, http.StatusUnprocessableEntity, false, "invalid amount")
	again := e.post("k1", amount(-1), "")
	wantStatus(t, again, http.StatusUnprocessableEntity, false, "invalid amount again")
	if !bytes.Equal(again.Body, first.Body) {
		t.Errorf("the refusal changed: %q then %q", first.Body, again.Body)
	}
	wantStatus(t, e.post("k1", amount(5), ""), http.StatusCreated, false, "corrected body, same key")
	e.want(3, 1)
}

// testConcurrent: duplicates that arrive while the first request is held in
// its charge wait for it and get its replay; the handler runs once.
func testConcurrent(t *testing.T, e *env) {
	const n = 6
	entered, release := e.ledger.holdNext(e.op)
	replies := make(chan reply, n)
	go func() { replies <- e.post("k1", amount(5), "") }()
	select {
	case <-entered:
	case <-time.After(waitLimit):
		close(release)
		t.Fatal("the first request never reached its charge")
	}
	for range n - 1 {
		go func() { replies <- e.post("k1", amount(5), "") }()
	}
	if !e.store.waitCalls(n, waitLimit) {
		close(release)
		t.Fatalf("the store saw %d of %d requests", e.store.calls(), n)
	}
	close(release)
	var got []reply
	for range n {
		select {
		case r := <-replies:
			got = append(got, r)
		case <-time.After(waitLimit):
			t.Fatalf("%d of %d answers after %v", len(got), n, waitLimit)
		}
	}
	executed := 0
	for _, r := range got {
		if r.Err != nil || r.Status != http.StatusCreated {
			t.Errorf("answer %v, want 201", r)
			continue
		}
		if !r.replayed() {
			executed++
		}
		if !bytes.Equal(r.Body, got[0].Body) {
			t.Errorf("answers differ: %q and %q", r.Body, got[0].Body)
		}
	}
	if executed != 1 {
		t.Errorf("%d answers were first executions, want 1", executed)
	}
	e.want(1, 1)
}

// testErrorPath: the framework's error path (an error answered by the error
// handler, 503) is a failure, released: never a recorded success.
func testErrorPath(t *testing.T, e *env) {
	e.ledger.armFail(e.op, 1)
	failed := e.post("k1", amount(5), "")
	wantStatus(t, failed, http.StatusServiceUnavailable, false, "charge refused")
	ok := e.post("k1", amount(5), "")
	wantStatus(t, ok, http.StatusCreated, false, "retry after the 503")
	wantReplayOf(t, e.post("k1", amount(5), ""), ok, "retry after the success")
	e.want(2, 1)
}

// testPanic: a panic before the charge, answered by the framework's
// recovery, releases the key; the retry charges once.
func testPanic(t *testing.T, e *env) {
	e.ledger.armPanic(e.op, 1)
	crashed := e.post("k1", amount(5), "")
	if crashed.Err == nil && (crashed.Status < 500 || crashed.replayed()) {
		t.Fatalf("request whose handler panicked: got %v, want a 5xx or the connection aborted", crashed)
	}
	if !e.store.waitReturned(1, waitLimit) {
		t.Fatal("the store never finished the panicked request")
	}
	ok := e.post("k1", amount(5), "")
	wantStatus(t, ok, http.StatusCreated, false, "retry after the panic")
	wantReplayOf(t, e.post("k1", amount(5), ""), ok, "retry after the success")
	e.want(2, 1)
}

// testDeclared: a handler that charged, declared it, and then answered 500
// has its 500 recorded: the retry gets it replayed, never a second charge.
func testDeclared(t *testing.T, e *env) {
	e.ledger.armFailAfter(e.op, 1)
	first := e.post("k1", amount(5), "")
	wantStatus(t, first, http.StatusInternalServerError, false, "receipt step failed")
	wantReplayOf(t, e.post("k1", amount(5), ""), first, "retry after the declared effect's 500")
	e.want(1, 1)
}

// testScopes: two callers using one key never see each other's answer.
func testScopes(t *testing.T, e *env) {
	a := e.post("shared", amount(5), "alice")
	wantStatus(t, a, http.StatusCreated, false, "alice")
	b := e.post("shared", amount(5), "bob")
	wantStatus(t, b, http.StatusCreated, false, "bob, same key")
	if bytes.Equal(a.Body, b.Body) {
		t.Errorf("bob got alice's answer %q", a.Body)
	}
	wantReplayOf(t, e.post("shared", amount(5), "alice"), a, "alice's retry")
	wantStatus(t, e.post("shared", amount(5), ""), http.StatusUnauthorized, false, "no credentials")
	e.want(2, 2)
}

// countingStore counts the Do calls of the store it wraps.
type countingStore struct {
	store server.Store

	mu       sync.Mutex
	started  int
	returned int
	changed  chan struct{}
}

func newCountingStore(s server.Store) *countingStore {
	return &countingStore{store: s, changed: make(chan struct{})}
}

func (c *countingStore) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	c.update(func() { c.started++ })
	defer c.update(func() { c.returned++ })
	return c.store.Do(ctx, req, run)
}

func (c *countingStore) update(f func()) {
	c.mu.Lock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *countingStore) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

func (c *countingStore) waitCalls(n int, limit time.Duration) bool {
	return c.waitFor(func() bool { return c.started >= n }, limit)
}

func (c *countingStore) waitReturned(n int, limit time.Duration) bool {
	return c.waitFor(func() bool { return c.returned >= n }, limit)
}

func (c *countingStore) waitFor(cond func() bool, limit time.Duration) bool {
	deadline := time.After(limit)
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}
