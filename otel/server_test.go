package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	idemotel "github.com/idemkit/idem/otel"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

var (
	routePayments = attribute.String("http.route", "/payments")
	storeMemory   = attribute.String("idem.store", "memory")
)

func outcome(v string) attribute.KeyValue  { return attribute.String("idem.outcome", v) }
func status(code int) attribute.KeyValue   { return attribute.Int("http.response.status_code", code) }
func waitEnd(v string) attribute.KeyValue  { return attribute.String("idem.wait.end", v) }
func storeErr(v string) attribute.KeyValue { return attribute.String("idem.store.error", v) }

// paymentsServer is a ServeMux with POST /payments behind the middleware
// over store, instrumented with tel, and a server span per request.
func paymentsServer(tel *telemetry, store server.Store, h http.Handler, opts ...server.Option) http.Handler {
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":1}`))
		})
	}
	opts = append(opts, idemotel.Server(idemotel.WithTracerProvider(tel.tp), idemotel.WithMeterProvider(tel.mp),
		idemotel.WithStoreName("memory")))
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(store, opts...)(h))
	return tel.serverSpans(mux)
}

// post sends POST /payments with key and body to h and returns the status.
func post(h http.Handler, key, body string, hdr ...string) int {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
	r.Header.Set(server.HeaderKey, key)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestServerReplayAndMismatch: an execution, its replay and a 422 are counted
// by outcome, route and store, never by key; each request's span says what
// the middleware did.
func TestServerReplayAndMismatch(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	h := paymentsServer(tel, memstore.New(), nil)
	for i, tc := range []struct {
		body string
		want int
	}{{`{"a":1}`, 201}, {`{"a":1}`, 201}, {`{"a":2}`, 422}} {
		if got := post(h, "order-1", tc.body); got != tc.want {
			t.Fatalf("request %d: status %d, want %d", i, got, tc.want)
		}
	}

	ms := tel.metrics(t)
	for _, tc := range []struct {
		name string
		want int64
		kv   []attribute.KeyValue
	}{
		{"executed", 1, []attribute.KeyValue{outcome("executed"), status(201), routePayments, storeMemory,
			attribute.String("http.request.method", "POST")}},
		{"replayed", 1, []attribute.KeyValue{outcome("replayed"), status(201), routePayments, storeMemory}},
		{"mismatch", 1, []attribute.KeyValue{outcome("mismatch"), status(422), attribute.String("idem.problem", "key-reused")}},
		{"all", 3, nil},
	} {
		if got := sum(t, ms, "idem.server.requests", tc.kv...); got != tc.want {
			t.Errorf("idem.server.requests %s = %d, want %d", tc.name, got, tc.want)
		}
	}
	if n, _ := hist(t, ms, "idem.server.wait.duration", waitEnd("replayed"), routePayments, storeMemory); n != 1 {
		t.Errorf("waits ending in a replay: %d, want 1", n)
	}
	if n, _ := hist(t, ms, "idem.server.handler.duration", status(201), routePayments); n != 1 {
		t.Errorf("handler runs: %d, want 1", n)
	}
	if n := sum(t, ms, "idem.server.store.errors"); n != 0 {
		t.Errorf("store errors: %d, want 0", n)
	}
	noKeyAttributes(t, ms)

	spans := tel.spans.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	for i, want := range []string{"executed", "replayed", "mismatch"} {
		ev, ok := event(spans[i], "idem.server")
		if !ok {
			t.Fatalf("span %d has no idem.server event: %v", i, spans[i].Events())
		}
		if v, _ := ev.Value("idem.outcome"); v.AsString() != want {
			t.Errorf("span %d: event idem.outcome %q, want %q", i, v.AsString(), want)
		}
		set := attribute.NewSet(spans[i].Attributes()...)
		if v, _ := set.Value("idem.outcome"); v.AsString() != want {
			t.Errorf("span %d: attribute idem.outcome %q, want %q", i, v.AsString(), want)
		}
		if set.HasValue("idem.key") {
			t.Errorf("span %d carries the key without WithKeyAttribute", i)
		}
	}
	if ev, _ := event(spans[0], "idem.server"); !ev.HasValue("idem.handler.duration") {
		t.Errorf("the execution's event does not say how long the handler ran: %v", ev)
	}
}

// TestServerKeyAttribute: WithKeyAttribute puts the key on the span, and only
// there.
func TestServerKeyAttribute(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(memstore.New(), idemotel.Server(idemotel.WithTracerProvider(tel.tp),
		idemotel.WithMeterProvider(tel.mp), idemotel.WithKeyAttribute()))(http.NotFoundHandler()))
	post(tel.serverSpans(mux), "order-7", "{}")
	spans := tel.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	set := attribute.NewSet(spans[0].Attributes()...)
	if v, _ := set.Value("idem.key"); v.AsString() != "order-7" {
		t.Errorf("idem.key = %q, want order-7", v.AsString())
	}
	noKeyAttributes(t, tel.metrics(t))
}

// TestServerWait: duplicates that arrive while the first request runs wait
// in the store; the histogram holds each one's wait (on the bubble's clock)
// and how it ended: one replays when the first finishes after 2s, one with
// Prefer: wait=1 gets its 409 after 1s.
func TestServerWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(t)
		release := make(chan struct{})
		h := paymentsServer(tel, memstore.New(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			<-release
			w.WriteHeader(http.StatusCreated)
		}))
		codes := make([]int, 3)
		var wg sync.WaitGroup
		wg.Go(func() { codes[0] = post(h, "k", "{}") })
		synctest.Wait() // the first runs the handler
		wg.Go(func() { codes[1] = post(h, "k", "{}") })
		wg.Go(func() { codes[2] = post(h, "k", "{}", "Prefer", "wait=1") })
		synctest.Wait() // both duplicates wait in the store
		time.Sleep(2 * time.Second)
		close(release)
		wg.Wait()
		if codes[0] != 201 || codes[1] != 201 || codes[2] != 409 {
			t.Fatalf("statuses %v, want [201 201 409]", codes)
		}

		ms := tel.metrics(t)
		for _, tc := range []struct {
			end     string
			n       uint64
			seconds float64
		}{{"replayed", 1, 2}, {"in-progress", 1, 1}} {
			n, s := hist(t, ms, "idem.server.wait.duration", waitEnd(tc.end), routePayments, storeMemory)
			if n != tc.n || s != tc.seconds {
				t.Errorf("waits ending %s: %d, %vs in all; want %d, %vs", tc.end, n, s, tc.n, tc.seconds)
			}
		}
		if n, s := hist(t, ms, "idem.server.handler.duration"); n != 1 || s != 2 {
			t.Errorf("handler: %d runs, %vs; want 1 run of 2s", n, s)
		}
		if got := sum(t, ms, "idem.server.requests", outcome("in-progress"), status(409)); got != 1 {
			t.Errorf("409s counted: %d, want 1", got)
		}
	})
}

// TestServerWaitThenExecuted: a duplicate waits for a first request whose
// handler then answers 503 (the key is released), and runs the handler
// itself; its wait is in the histogram, ending "executed", for the 2s it
// waited (on the bubble's clock), and its span's event says so. The first
// request, which did not wait, is not.
func TestServerWaitThenExecuted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(t)
		release := make(chan struct{})
		var first atomic.Bool
		h := paymentsServer(tel, memstore.New(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if first.CompareAndSwap(false, true) {
				<-release
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		codes := make([]int, 2)
		var wg sync.WaitGroup
		wg.Go(func() { codes[0] = post(h, "k", "{}") })
		synctest.Wait() // the first runs the handler
		wg.Go(func() { codes[1] = post(h, "k", "{}") })
		synctest.Wait() // the duplicate waits in the store
		time.Sleep(2 * time.Second)
		close(release)
		wg.Wait()
		if codes[0] != 503 || codes[1] != 201 {
			t.Fatalf("statuses %v, want [503 201]", codes)
		}

		ms := tel.metrics(t)
		if n, s := hist(t, ms, "idem.server.wait.duration", waitEnd("executed"), routePayments, storeMemory); n != 1 || s != 2 {
			t.Errorf("waits ending in an execution: %d, %vs in all; want 1, 2s", n, s)
		}
		if n, _ := hist(t, ms, "idem.server.wait.duration"); n != 1 {
			t.Errorf("waits: %d, want only the duplicate's", n)
		}
		if got := sum(t, ms, "idem.server.requests", outcome("executed")); got != 2 {
			t.Errorf("executions counted: %d, want 2", got)
		}
		var waited []float64
		for _, span := range tel.spans.Ended() {
			ev, ok := event(span, "idem.server")
			if !ok {
				t.Fatalf("span without an idem.server event: %v", span.Events())
			}
			if v, ok := ev.Value("idem.wait.duration"); ok {
				waited = append(waited, v.AsFloat64())
				if end, _ := ev.Value("idem.wait.end"); end.AsString() != "executed" {
					t.Errorf("the waiting execution's event: idem.wait.end %q, want executed", end.AsString())
				}
			}
		}
		if len(waited) != 1 || waited[0] != 2 {
			t.Errorf("events with idem.wait.duration: %v, want the duplicate's alone, 2s", waited)
		}
	})
}

// failingStore fails every Do: before calling run, or, with afterRun, after
// it (the response could not be recorded).
type failingStore struct{ afterRun bool }

func (s failingStore) Do(ctx context.Context, _ server.Request, run server.RunFunc) (server.Result, error) {
	if !s.afterRun {
		return server.Result{}, errors.New("connection refused")
	}
	run(ctx)
	return server.Result{}, fmt.Errorf("%w: commit failed", server.ErrNotRecorded)
}

// TestServerStoreFailure: a store that fails before the handler ran (503) and
// one that fails after it (outcome-unknown) are counted apart, and the span
// records the error.
func TestServerStoreFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		store    failingStore
		status   int
		outcome  string
		storeErr string
	}{
		{"before the handler", failingStore{}, 503, "store-unavailable", "unavailable"},
		{"after the handler", failingStore{afterRun: true}, 500, "outcome-unknown", "not-recorded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tel := newTelemetry(t)
			if got := post(paymentsServer(tel, tc.store, nil), "k", "{}"); got != tc.status {
				t.Fatalf("status %d, want %d", got, tc.status)
			}
			ms := tel.metrics(t)
			if n := sum(t, ms, "idem.server.store.errors", storeErr(tc.storeErr), routePayments, storeMemory); n != 1 {
				t.Errorf("store errors %s: %d, want 1", tc.storeErr, n)
			}
			if n := sum(t, ms, "idem.server.requests", outcome(tc.outcome), status(tc.status)); n != 1 {
				t.Errorf("requests %s: %d, want 1", tc.outcome, n)
			}
			spans := tel.spans.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			if st := spans[0].Status(); st.Code != codes.Error {
				t.Errorf("span status %v, want Error", st)
			}
			if _, ok := event(spans[0], "exception"); !ok {
				t.Errorf("the store's error is not recorded on the span: %v", spans[0].Events())
			}
		})
	}
}

// TestServerNoRoute: a request that no ServeMux routed has no http.route, and
// one with an unknown method is counted as _OTHER.
func TestServerNoRoute(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	mw := server.Middleware(memstore.New(), server.WithMethods("POST", "CHARGE"),
		idemotel.Server(idemotel.WithMeterProvider(tel.mp), idemotel.WithTracerProvider(tel.tp)))(http.NotFoundHandler())
	r := httptest.NewRequest("CHARGE", "/x", strings.NewReader("{}"))
	r.Header.Set(server.HeaderKey, "k")
	mw.ServeHTTP(httptest.NewRecorder(), r)
	ms := tel.metrics(t)
	if n := sum(t, ms, "idem.server.requests", attribute.String("http.request.method", "_OTHER")); n != 1 {
		t.Errorf("requests with method _OTHER: %d, want 1", n)
	}
	if n := sum(t, ms, "idem.server.requests", routePayments); n != 0 {
		t.Errorf("a route on an unrouted request")
	}
}

// TestServerGlobalProviders: with no provider given, the global (no-op)
// ones are used, and a request without a span is served as before.
func TestServerGlobalProviders(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(memstore.New(), idemotel.Server())(http.NotFoundHandler()))
	if got := post(mux, "k", "{}"); got != 404 {
		t.Fatalf("status %d, want 404", got)
	}
}

func TestOptionsPanic(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"WithTracerProvider": func() { idemotel.WithTracerProvider(nil) },
		"WithMeterProvider":  func() { idemotel.WithMeterProvider(nil) },
		"WithRoute":          func() { idemotel.WithRoute(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), name) {
					t.Errorf("panic %v, want one naming %s", v, name)
				}
			}()
			f()
		})
	}
}

// TestServerAttributesIgnoreWhatCallersSend: requests with random Host
// headers, paths under a catch-all route, methods beyond the conventions'
// and keys make no more attribute sets than the same requests from an
// ordinary caller: the server's metric attributes come from the route
// pattern, the method's standard name (or _OTHER), the status and the
// middleware's own outcomes (issue 27: caller-chosen Host headers took
// idem-server's /metrics from 151 to 106,045 series).
func TestServerAttributesIgnoreWhatCallersSend(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	mw := server.Middleware(memstore.New(), server.WithMethods(http.MethodPost, "XPOST"),
		idemotel.Server(idemotel.WithMeterProvider(tel.mp), idemotel.WithStoreName("memory")))
	mux := http.NewServeMux()
	mux.Handle("/things/", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	send := func(i int, host, path, method string) {
		r := httptest.NewRequest(method, path, strings.NewReader("{}"))
		r.Host = host
		r.Header.Set(server.HeaderKey, fmt.Sprintf("k-%d", i))
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	sets := func() int {
		n := 0
		for _, data := range tel.metrics(t) {
			switch d := data.(type) {
			case metricdata.Sum[int64]:
				n += len(d.DataPoints)
			case metricdata.Histogram[float64]:
				n += len(d.DataPoints)
			}
		}
		return n
	}
	send(0, "api.example", "/things/a", http.MethodPost)
	send(1, "api.example", "/things/a", "XPOST")
	base := sets()
	for i := range 2000 {
		send(i+2, fmt.Sprintf("h%d.example:%d", i, 1000+i), fmt.Sprintf("/things/%d", i), []string{http.MethodPost, "XPOST"}[i%2])
	}
	if got := sets(); got != base {
		t.Errorf("%d data points after 2,000 requests with random hosts, paths and keys, want %d as after the first two", got, base)
	}
}
