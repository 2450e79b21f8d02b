package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestMiddlewareConstructionPanics(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	cases := []struct {
		name, want string
		f          func()
	}{
		{"nil store", "server: Middleware(nil): want a Store", func() { Middleware(nil) }},
		{"nil handler", "server: Middleware(...)(nil): want an http.Handler", func() { Middleware(store)(nil) }},
		{"nil option", "server: Middleware(nil Option): want an Option", func() { Middleware(store, nil) }},
		{"no methods", "server: WithMethods(): want at least one method", func() { WithMethods() }},
		{"bad method", `server: WithMethods("PO ST"): want method names that are HTTP tokens`, func() { WithMethods("POST", "PO ST") }},
		{"key length 0", "server: WithMaxKeyLength(0): want 1 <= n <= 255", func() { WithMaxKeyLength(0) }},
		{"key length 256", "server: WithMaxKeyLength(256): want 1 <= n <= 255", func() { WithMaxKeyLength(256) }},
		{"ttl 0", "server: WithTTL(0s): want a positive duration", func() { WithTTL(0) }},
		{"lock ttl negative", "server: WithLockTTL(-1s): want a positive duration", func() { WithLockTTL(-time.Second) }},
		{"body negative", "server: WithMaxBodyBytes(-1): want n >= 0", func() { WithMaxBodyBytes(-1) }},
		{"response negative", "server: WithMaxResponseBytes(-1): want n >= 0", func() { WithMaxResponseBytes(-1) }},
		{"nil scope", "server: WithScope(nil): want a function", func() { WithScope(nil) }},
		{"nil fingerprint", "server: WithFingerprint(nil): want a Fingerprint", func() { WithFingerprint(nil) }},
		{"set-cookie", `server: WithStoredHeaders("set-cookie"): want a header that may be stored and replayed (Set-Cookie never is)`, func() { WithStoredHeaders("set-cookie") }},
		{"date", `server: WithStoredHeaders("Date"): want a header that may be stored and replayed (Date never is)`, func() { WithStoredHeaders("Date") }},
		{"connection", `server: WithStoredHeaders("Connection"): want a header that may be stored and replayed (Connection never is)`, func() { WithStoredHeaders("Connection") }},
		{"transfer-encoding", `server: WithStoredHeaders("Transfer-Encoding"): want a header that may be stored and replayed (Transfer-Encoding never is)`, func() { WithStoredHeaders("Transfer-Encoding") }},
		{"replay marker", `server: WithStoredHeaders("Idempotent-Replayed"): want a header that may be stored and replayed (Idempotent-Replayed never is)`, func() { WithStoredHeaders(HeaderReplayed) }},
		{"bad header name", `server: WithStoredHeaders("X Bad"): want header names that are HTTP tokens`, func() { WithStoredHeaders("X-Ok", "X Bad") }},
		{"wait negative", "server: WithInProgressWait(-1ns): want a duration >= 0", func() { WithInProgressWait(-1) }},
		{"nil hook", "server: WithOnOutcome(nil): want a function", func() { WithOnOutcome(nil) }},
		{"guard nil store", "server: NewGuard(nil): want a Store", func() { NewGuard(nil) }},
		{"guard nil option", "server: NewGuard(nil Option): want an Option", func() { NewGuard(store, nil) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if msg := mustPanic(t, c.f); msg != c.want {
				t.Errorf("panic %q, want %q", msg, c.want)
			}
		})
	}
}

func TestUnprotectedMethodsPassThrough(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	var seen *http.Request
	h := counting(func(w http.ResponseWriter, r *http.Request) { seen = r; w.WriteHeader(http.StatusTeapot) })
	mw := Middleware(store)(h)
	for _, m := range []string{"GET", "HEAD", "PUT", "DELETE", "OPTIONS"} {
		for _, key := range []string{"", "k1", "bad key with spaces"} {
			r := request(m, "/x", "", HeaderKey, key)
			rec := serve(mw, r)
			if rec.Code != http.StatusTeapot || seen != r {
				t.Errorf("%s with key %q: status %d, same request %v; want the handler's answer to the caller's request", m, key, rec.Code, seen == r)
			}
		}
	}
	if calls, _ := store.stats(); calls != 0 {
		t.Errorf("store asked %d times for unprotected methods", calls)
	}

	// WithMethods replaces the default set.
	put := Middleware(store, WithMethods("PUT"))(h)
	if rec := serve(put, request("POST", "/x", "{}")); rec.Code != http.StatusTeapot {
		t.Errorf("POST with WithMethods(PUT): %d, want pass-through", rec.Code)
	}
	checkProblem(t, serve(put, request("PUT", "/x", "{}")), http.StatusBadRequest, ProblemMissingKey)
}

// errReader fails every read.
var errRead = errors.New("connection reset")

func TestBadInputNeverReachesTheStore(t *testing.T) {
	t.Parallel()
	errScope := errors.New("no principal")
	cases := []struct {
		name   string
		req    func() *http.Request
		opts   []Option
		status int
		typ    string
	}{
		{"missing key", func() *http.Request { return request("POST", "/x", "{}") }, nil, 400, ProblemMissingKey},
		{"blank key", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, "  ") }, nil, 400, ProblemMissingKey},
		{"long key", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, strings.Repeat("a", 256)) }, nil, 400, ProblemInvalidKey},
		{"key over WithMaxKeyLength", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, "abcdefghi") },
			[]Option{WithMaxKeyLength(8)}, 400, ProblemInvalidKey},
		{"space in key", func() *http.Request { return request("PATCH", "/x", "{}", HeaderKey, "a b") }, nil, 400, ProblemInvalidKey},
		{"non-ASCII key", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, "ключ") }, nil, 400, ProblemInvalidKey},
		{"malformed sf-string", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, `"abc`) }, nil, 400, ProblemInvalidKey},
		{"two key lines", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, "a", HeaderKey, "a") }, nil, 400, ProblemInvalidKey},
		{"scope error", func() *http.Request { return request("POST", "/x", "{}", HeaderKey, "k") },
			[]Option{WithScope(func(*http.Request) (string, error) { return "", errScope })}, 401, ProblemUnauthenticated},
		{"body over limit", func() *http.Request { return request("POST", "/x", strings.Repeat("x", 11), HeaderKey, "k") },
			[]Option{WithMaxBodyBytes(10)}, 413, ProblemBodyTooLarge},
		{"chunked body over limit", func() *http.Request {
			r := request("POST", "/x", "", HeaderKey, "k")
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(strings.Repeat("x", 11))), -1
			return r
		}, []Option{WithMaxBodyBytes(10)}, 413, ProblemBodyTooLarge},
		{"outer MaxBytesReader", func() *http.Request {
			r := request("POST", "/x", "", HeaderKey, "k")
			r.Body, r.ContentLength = http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(strings.Repeat("x", 11))), 5), -1
			return r
		}, nil, 413, ProblemBodyTooLarge},
		{"unreadable body", func() *http.Request {
			r := request("POST", "/x", "", HeaderKey, "k")
			r.Body, r.ContentLength = io.NopCloser(iotest.ErrReader(errRead)), -1
			return r
		}, nil, 400, ProblemBodyUnreadable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{}
			h := counting(created)
			var events []OutcomeEvent
			opts := append([]Option{WithOnOutcome(func(e OutcomeEvent) { events = append(events, e) })}, c.opts...)
			checkProblem(t, serve(Middleware(store, opts...)(h), c.req()), c.status, c.typ)
			if calls, _ := store.stats(); calls != 0 || h.runs.Load() != 0 {
				t.Errorf("store asked %d times, handler ran %d times; want 0 and 0", calls, h.runs.Load())
			}
			if len(events) != 1 || events[0].Status != c.status || events[0].Problem != c.typ || events[0].Err == nil || events[0].Outcome != 0 {
				t.Errorf("events %+v, want one with status %d, problem %s and an error", events, c.status, c.typ)
			}
		})
	}
}

func TestBodyLimitIsInclusive(t *testing.T) {
	t.Parallel()
	h := counting(created)
	mw := Middleware(&fakeStore{}, WithMaxBodyBytes(10))(h)
	if rec := serve(mw, request("POST", "/x", "1234567890", HeaderKey, "k")); rec.Code != http.StatusCreated {
		t.Fatalf("body of exactly the limit: %d %s", rec.Code, rec.Body)
	}
	r := request("POST", "/x", "", HeaderKey, "k2")
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader("1234567890")), -1
	if rec := serve(mw, r); rec.Code != http.StatusCreated {
		t.Fatalf("chunked body of exactly the limit: %d %s", rec.Code, rec.Body)
	}
}

func TestFingerprintFromReceivedBytes(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	var got []byte
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		if r.ContentLength != int64(len(got)) {
			t.Errorf("handler sees ContentLength %d for %d bytes", r.ContentLength, len(got))
		}
		// A handler that rewrites the request cannot change what is recorded.
		r.URL.Path, r.Method = "/elsewhere", "PUT"
		r.Body = io.NopCloser(strings.NewReader("other"))
		w.WriteHeader(http.StatusAccepted)
	})
	mw := Middleware(store)(h)
	body := `{"amount": 5}`
	r := request("POST", "/pay?x=1", "", HeaderKey, "k")
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), -1 // chunked
	want := ExactBody(request("POST", "/pay?x=1", ""), []byte(body))
	if rec := serve(mw, r); rec.Code != http.StatusAccepted {
		t.Fatalf("first: %d", rec.Code)
	}
	if string(got) != body {
		t.Errorf("handler read %q, want %q", got, body)
	}
	if fp := store.lastRequest().Fingerprint; fp != want {
		t.Errorf("fingerprint %s, want %s", fp, want)
	}
	rec := serve(mw, request("POST", "/pay?x=1", body, HeaderKey, `"k"`))
	if rec.Code != http.StatusAccepted || rec.Header().Get(HeaderReplayed) != "true" || h.runs.Load() != 1 {
		t.Errorf("retry: %d replayed=%q runs=%d; want the replay", rec.Code, rec.Header().Get(HeaderReplayed), h.runs.Load())
	}
	req := store.lastRequest()
	if req.Key != "k" || req.TTL != DefaultTTL || req.LockTTL != DefaultLockTTL || req.Scope != "" {
		t.Errorf("store request %+v, want key k with the default TTLs and the empty scope", req)
	}
}

func TestMismatchAndInProgress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		res        Result
		status     int
		typ        string
		retryAfter string
	}{
		{"mismatch", Result{Outcome: OutcomeMismatch}, 422, ProblemMismatch, ""},
		// No handler run yet: no estimate, come back in a second, whatever the lease.
		{"in progress, lease known", Result{Outcome: OutcomeInProgress, RetryAfter: 2500 * time.Millisecond}, 409, ProblemInProgress, "1"},
		{"in progress, lease unknown", Result{Outcome: OutcomeInProgress}, 409, ProblemInProgress, "1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{do: func(context.Context, Request, RunFunc) (Result, error) { return c.res, nil }}
			h := counting(created)
			rec := serve(Middleware(store)(h), request("POST", "/x", "{}", HeaderKey, "k"))
			checkProblem(t, rec, c.status, c.typ)
			if got := rec.Header().Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			if h.runs.Load() != 0 {
				t.Errorf("handler ran")
			}
		})
	}
}

func TestStoreFailures(t *testing.T) {
	t.Parallel()
	errDown := errors.New("connection refused")
	cases := []struct {
		name   string
		do     func(ctx context.Context, req Request, run RunFunc) (Result, error)
		runs   int32
		status int
		typ    string
	}{
		{"unreachable before the run", func(context.Context, Request, RunFunc) (Result, error) {
			return Result{}, errDown
		}, 0, 503, ProblemStoreUnavailable},
		{"not recorded after the run", func(ctx context.Context, _ Request, run RunFunc) (Result, error) {
			run(ctx)
			return Result{}, fmt.Errorf("commit: %w", ErrNotRecorded)
		}, 1, 500, ProblemOutcomeUnknown},
		{"other error after the run", func(ctx context.Context, _ Request, run RunFunc) (Result, error) {
			run(ctx)
			return Result{}, errDown
		}, 1, 500, ProblemOutcomeUnknown},
		{"executed without running", func(context.Context, Request, RunFunc) (Result, error) {
			return Result{Outcome: OutcomeExecuted, Response: &Response{Status: 200}}, nil
		}, 0, 503, ProblemStoreUnavailable},
		{"replayed without a response", func(context.Context, Request, RunFunc) (Result, error) {
			return Result{Outcome: OutcomeReplayed}, nil
		}, 0, 503, ProblemStoreUnavailable},
		{"ran but reported a replay", func(ctx context.Context, _ Request, run RunFunc) (Result, error) {
			resp, _ := run(ctx)
			return Result{Outcome: OutcomeReplayed, Response: resp}, nil
		}, 1, 500, ProblemOutcomeUnknown},
		{"unknown outcome", func(context.Context, Request, RunFunc) (Result, error) {
			return Result{Outcome: Outcome(99)}, nil
		}, 0, 503, ProblemStoreUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := counting(created)
			var ev OutcomeEvent
			mw := Middleware(&fakeStore{do: c.do}, WithOnOutcome(func(e OutcomeEvent) { ev = e }))(h)
			rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
			checkProblem(t, rec, c.status, c.typ)
			// 503 invites a retry after a second; outcome-unknown never does.
			if want := map[int]string{503: "1", 500: ""}[c.status]; rec.Header().Get("Retry-After") != want {
				t.Errorf("Retry-After %q, want %q", rec.Header().Get("Retry-After"), want)
			}
			if rec.Header().Get("Location") != "" {
				t.Errorf("the unrecorded response leaked: Location %q", rec.Header().Get("Location"))
			}
			if h.runs.Load() != c.runs {
				t.Errorf("handler ran %d times, want %d", h.runs.Load(), c.runs)
			}
			wantOutcome := Outcome(0)
			if c.runs > 0 {
				wantOutcome = OutcomeUnknown
			}
			if ev.Err == nil || ev.Status != c.status || ev.Outcome != wantOutcome {
				t.Errorf("event %+v, want status %d, outcome %v, with the error", ev, c.status, wantOutcome)
			}
		})
	}
}

// TestOutcomeUnknownFromTheStore: a key the store marked outcome unknown is
// answered 500 outcome-unknown, without running the handler and without
// inviting a retry.
func TestOutcomeUnknownFromTheStore(t *testing.T) {
	t.Parallel()
	h := counting(created)
	var ev OutcomeEvent
	store := &fakeStore{do: func(context.Context, Request, RunFunc) (Result, error) {
		return Result{Outcome: OutcomeUnknown}, nil
	}}
	rec := serve(Middleware(store, WithOnOutcome(func(e OutcomeEvent) { ev = e }))(h), request("POST", "/x", "{}", HeaderKey, "k"))
	checkProblem(t, rec, http.StatusInternalServerError, ProblemOutcomeUnknown)
	if rec.Header().Get("Retry-After") != "" || h.runs.Load() != 0 {
		t.Errorf("Retry-After %q, %d runs; want none and none", rec.Header().Get("Retry-After"), h.runs.Load())
	}
	if ev.Outcome != OutcomeUnknown || ev.Problem != ProblemOutcomeUnknown {
		t.Errorf("event %+v, want the outcome-unknown outcome and problem", ev)
	}
}

func TestStoreContextReachesHandler(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	store := &fakeStore{do: func(ctx context.Context, _ Request, run RunFunc) (Result, error) {
		resp, _ := run(context.WithValue(ctx, ctxKey{}, "tx"))
		return Result{Outcome: OutcomeExecuted, Response: resp}, nil
	}}
	mw := Middleware(store)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, fmt.Sprint(r.Context().Value(ctxKey{})))
	}))
	if rec := serve(mw, request("POST", "/x", "", HeaderKey, "k")); rec.Body.String() != "tx" {
		t.Fatalf("handler saw %q, want the store's context value", rec.Body)
	}
}

func TestCompletedResponseIsKeptWhenClientIsGone(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := counting(created)
	mw := Middleware(store)(h)
	serve(mw, request("POST", "/x", "{}", HeaderKey, "k").WithContext(ctx))
	if _, keeps := store.stats(); len(keeps) != 1 || !keeps[0] {
		t.Fatalf("keep decisions %v, want [true]: a completed response is recorded", keeps)
	}
	if rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k")); rec.Header().Get(HeaderReplayed) != "true" || h.runs.Load() != 1 {
		t.Fatalf("retry after the client left: not a replay (runs %d)", h.runs.Load())
	}
}
