package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// waitLimit bounds every wait of the suite, so that a broken store fails a
// scenario instead of hanging it.
const waitLimit = 15 * time.Second

// Headers the suite sets around its handler, to check which ones are replayed.
const (
	fixedDate  = "Mon, 02 Jan 2006 15:04:05 GMT"
	cookie     = "session=s1; Path=/"
	etag       = `"op-v1"`
	privateHdr = "X-Not-Stored"
)

// env is one scenario's world: the effects, the observed store, the
// middleware, the suite's handler on an httptest server, and a client.
type env struct {
	t      *testing.T
	f      Fixture
	obs    *observer
	srv    *httptest.Server
	client *http.Client
	op     string // the scenario's operation, whose effects are counted
	lim    *server.Limits

	mu          sync.Mutex
	beforeWrite func(r *http.Request) error
	afterWrite  func(r *http.Request)
	failAfter   func(r *http.Request) bool
	onOuter     func(r *http.Request)
	gates       []*gate
}

func newEnv(t *testing.T, f Fixture, opts ...server.Option) *env {
	t.Helper()
	return newEnvLimits(t, f, server.NewLimits(), opts...)
}

// newEnvLimits is newEnv with the middleware's Limits given (by default each
// env has Limits of its own, so that a scenario can see its duplicates take
// their turns to wait).
func newEnvLimits(t *testing.T, f Fixture, lim *server.Limits, opts ...server.Option) *env {
	t.Helper()
	e := &env{t: t, f: f, obs: newObserver(f.Store), op: "op" + randomHex(8), lim: lim}
	opts = append([]server.Option{server.WithLimits(lim)}, opts...)
	handler := effectHandler(f.Effects, func() hooks {
		h := e.hooks()
		return hooks{beforeWrite: h.beforeWrite, afterWrite: h.afterWrite, failAfterWrite: h.failAfter}
	})
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Set-Cookie", cookie)
		h.Set("Date", fixedDate)
		h.Set("ETag", etag)
		h.Set(privateHdr, "1")
		handler.ServeHTTP(w, r)
	})
	protected := server.Middleware(e.obs, opts...)(create)
	mux := http.NewServeMux()
	mux.Handle("POST /ops", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := e.hooks().onOuter; h != nil {
			h(r)
		}
		protected.ServeHTTP(w, r)
	}))
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic scenario is noisy by design
	e.srv.Start()
	// No keep-alive: a request that hits a connection the server aborted must
	// fail, not be retried silently by the transport on a new one.
	e.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * waitLimit}
	t.Cleanup(func() {
		e.mu.Lock()
		gates := e.gates
		e.mu.Unlock()
		for _, g := range gates {
			g.open()
		}
		e.srv.Close()
	})
	return e
}

// hooks returns a consistent copy of the hooks under the lock.
func (e *env) hooks() (h struct {
	beforeWrite func(r *http.Request) error
	afterWrite  func(r *http.Request)
	failAfter   func(r *http.Request) bool
	onOuter     func(r *http.Request)
}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h.beforeWrite, h.afterWrite, h.failAfter, h.onOuter = e.beforeWrite, e.afterWrite, e.failAfter, e.onOuter
	return h
}

func (e *env) setBeforeWrite(f func(r *http.Request) error) {
	e.mu.Lock()
	e.beforeWrite = f
	e.mu.Unlock()
}

func (e *env) setAfterWrite(f func(r *http.Request)) {
	e.mu.Lock()
	e.afterWrite = f
	e.mu.Unlock()
}

func (e *env) setFailAfterWrite(f func(r *http.Request) bool) {
	e.mu.Lock()
	e.failAfter = f
	e.mu.Unlock()
}

func (e *env) setOnOuter(f func(r *http.Request)) {
	e.mu.Lock()
	e.onOuter = f
	e.mu.Unlock()
}

// newGate returns a gate that the scenario's cleanup opens, so that a failing
// scenario never leaves a handler blocked.
func (e *env) newGate() *gate {
	g := &gate{ch: make(chan struct{})}
	e.mu.Lock()
	e.gates = append(e.gates, g)
	e.mu.Unlock()
	return g
}

// blockFirstWrite makes the first business write of the scenario announce
// itself on entered and wait for release; later writes go through.
func (e *env) blockFirstWrite() (entered, release *gate) {
	entered, release = e.newGate(), e.newGate()
	var once sync.Once
	e.setBeforeWrite(func(*http.Request) error {
		first := false
		once.Do(func() { first = true })
		if first {
			entered.open()
			<-release.ch
		}
		return nil
	})
	return entered, release
}

// gate is a one-shot broadcast.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait blocks until the gate opens, failing the test after waitLimit.
func (g *gate) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
	}
}

// body returns a valid request body for the scenario's operation.
func (e *env) body(amount int64) string {
	return fmt.Sprintf(`{"op":%q,"amount":%d,"currency":"EUR"}`, e.op, amount)
}

// effects counts the scenario operation's effects.
func (e *env) effects() int {
	e.t.Helper()
	n, err := e.f.Effects.Count(context.Background(), e.op)
	if err != nil {
		e.t.Fatalf("Effects.Count: %v", err)
	}
	return n
}

// wantEffects checks the effect count.
func (e *env) wantEffects(want int) {
	e.t.Helper()
	if got := e.effects(); got != want {
		e.t.Errorf("%d effects recorded for the operation, want %d", got, want)
	}
}

// reply is a response read whole, or the error of the attempt.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// A reqOpt changes a request before it is sent.
type reqOpt func(*http.Request)

// withKey sets one Idempotency-Key line.
func withKey(k string) reqOpt {
	return func(r *http.Request) { r.Header.Set(server.HeaderKey, k) }
}

// withKeyLines sends several Idempotency-Key lines.
func withKeyLines(ks ...string) reqOpt {
	return func(r *http.Request) { r.Header[server.HeaderKey] = ks }
}

// withBearer sets a bearer token.
func withBearer(tok string) reqOpt {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

// withPrefer sets the Prefer header (RFC 7240).
func withPrefer(v string) reqOpt {
	return func(r *http.Request) { r.Header.Set(server.HeaderPrefer, v) }
}

// chunked sends the body without a Content-Length.
func chunked() reqOpt {
	return func(r *http.Request) {
		r.ContentLength = -1
		r.Body = io.NopCloser(r.Body)
		r.GetBody = nil
	}
}

// post sends POST /ops.
func (e *env) post(body string, opts ...reqOpt) reply {
	return e.postCtx(context.Background(), body, opts...)
}

func (e *env) postCtx(ctx context.Context, body string, opts ...reqOpt) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/ops", strings.NewReader(body))
	if err != nil {
		return reply{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for _, o := range opts {
		o(req)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// replayed reports the replay marker.
func (r reply) replayed() bool { return r.Header.Get(server.HeaderReplayed) == "true" }

func (r reply) String() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// wantExecuted checks a first execution: 201, no replay marker.
func wantExecuted(t *testing.T, r reply, what string) {
	t.Helper()
	if r.Err != nil || r.Status != http.StatusCreated {
		t.Errorf("%s: got %v, want 201 Created", what, r)
		return
	}
	if v := r.Header.Values(server.HeaderReplayed); len(v) != 0 {
		t.Errorf("%s: a first execution carries %s: %q", what, server.HeaderReplayed, v)
	}
}

// wantReplayOf checks that r replays first byte for byte.
func wantReplayOf(t *testing.T, r, first reply, what string) {
	t.Helper()
	if r.Err != nil {
		t.Errorf("%s: %v, want a replay", what, r.Err)
		return
	}
	if !r.replayed() {
		t.Errorf("%s: got %v without %s: true, want a replay", what, r, server.HeaderReplayed)
	}
	if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
		t.Errorf("%s: replay %v differs from the first response %v", what, r, first)
	}
}

// wantProblem checks a problem answer of the middleware.
func wantProblem(t *testing.T, r reply, status int, typ, what string) {
	t.Helper()
	if r.Err != nil || r.Status != status {
		t.Errorf("%s: got %v, want %d %s", what, r, status, typ)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("%s: Cache-Control %q, want no-store", what, cc)
	}
	var p server.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Errorf("%s: problem body %q: %v", what, r.Body, err)
		return
	}
	if p.Type != typ || p.Status != status {
		t.Errorf("%s: problem type %q status %d, want %q %d", what, p.Type, p.Status, typ, status)
	}
	if r.replayed() {
		t.Errorf("%s: a problem answer carries %s", what, server.HeaderReplayed)
	}
}

// wantRetryAfter checks that r carries a positive whole-seconds Retry-After.
func wantRetryAfter(t *testing.T, r reply, what string) {
	t.Helper()
	v := r.Header.Get("Retry-After")
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n < 1 {
		t.Errorf("%s: Retry-After %q, want a positive number of seconds", what, v)
	}
}

// wantRetryAfterAtMost checks that r carries a Retry-After of at least one
// second and no more than lease (rounded up to whole seconds).
func wantRetryAfterAtMost(t *testing.T, r reply, lease time.Duration, what string) {
	t.Helper()
	wantRetryAfter(t, r, what)
	var n int
	if _, err := fmt.Sscanf(r.Header.Get("Retry-After"), "%d", &n); err == nil && time.Duration(n)*time.Second > lease.Round(time.Second) {
		t.Errorf("%s: Retry-After %ds is longer than the %v lease", what, n, lease)
	}
}

// wantLeaseRetryAfter checks that every in-progress Result the store gave
// had a RetryAfter no longer than the request's LockTTL.
func (e *env) wantLeaseRetryAfter(lockTTL time.Duration) {
	e.t.Helper()
	for _, d := range e.obs.snapshot().inProgressRetryAfter {
		if d > lockTTL {
			e.t.Errorf("the store said in progress with RetryAfter %v, longer than the %v lease", d, lockTTL)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// jsonHasType reports whether body is a JSON object whose "type" is typ.
func jsonHasType(body []byte, typ string) bool {
	var p struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(body, &p) == nil && p.Type == typ
}
