package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
)

// answerRow is one upstream answer and what the gateway makes of it.
type answerRow struct {
	name     string
	status   int
	header   http.Header
	dedupes  bool // -upstream-dedupes
	recorded bool
}

// The rows of docs/CONTRACT.md's gateway table, one upstream status each:
// recorded (the retry replays it, the upstream acted once) or released (the
// retry is forwarded again), on each of the gateway's stores (PostgreSQL on a
// schema of each row's own, Redis with a key of each row's own).
func TestGatewayUpstreamAnswers(t *testing.T) {
	t.Parallel()
	rows := []answerRow{
		{"200", 200, nil, false, true},
		{"201", 201, nil, false, true},
		{"404 not a refusal", 404, nil, false, true},
		{"409 conflict", 409, nil, false, true},
		{"400 refusal", 400, nil, false, false},
		{"401 refusal", 401, nil, false, false},
		{"422 refusal", 422, nil, false, false},
		{"429 refusal", 429, http.Header{"Retry-After": {"3"}}, false, false},
		{"503 with Retry-After", 503, http.Header{"Retry-After": {"2"}}, false, false},
		{"503 without Retry-After", 503, nil, false, true},
		{"500", 500, nil, false, true},
		{"502 of the upstream's own proxy", 502, nil, false, true},
		{"504", 504, nil, false, true},
		{"303 after a POST", 303, http.Header{"Location": {"/orders/1"}}, false, true},
		{"302", 302, http.Header{"Location": {"/orders/1"}}, false, true},
		{"307", 307, http.Header{"Location": {"/elsewhere"}}, false, false},
		{"308", 308, http.Header{"Location": {"/elsewhere"}}, false, false},
		{"500, upstream dedupes", 500, nil, true, false},
		{"303, upstream dedupes", 303, http.Header{"Location": {"/orders/1"}}, true, false},
		{"201, upstream dedupes", 201, nil, true, true},
		{"422, upstream dedupes", 422, nil, true, false},
	}
	for _, st := range binaryStores {
		for _, row := range rows {
			t.Run(st.name+"/"+row.name, func(t *testing.T) {
				t.Parallel()
				upstreamAnswerRow(t, st.args(t), row)
			})
		}
	}
}

// upstreamAnswerRow is one row of TestGatewayUpstreamAnswers on the store
// that storeArgs select.
func upstreamAnswerRow(t *testing.T, storeArgs []string, row answerRow) {
	key := unique("k1")
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		for k, v := range row.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(row.status)
		fmt.Fprintf(w, `{"status":%d}`, row.status)
	})
	args := storeArgs
	if row.dedupes {
		args = append(args, "-upstream-dedupes")
	}
	gw := startGateway(t, up.URL, args...)
	first := send(t, "POST", gw+"/orders", "op", key, `{"n":1}`, nil)
	if first.Status != row.status || first.replayed() || first.Body != fmt.Sprintf(`{"status":%d}`, row.status) {
		t.Fatalf("first: %d %q, want the upstream's %d", first.Status, first.Body, row.status)
	}
	for k := range row.header {
		if first.Header.Get(k) != row.header.Get(k) {
			t.Errorf("first: %s %q, want the upstream's %q", k, first.Header.Get(k), row.header.Get(k))
		}
	}
	again := send(t, "POST", gw+"/orders", "op", key, `{"n":1}`, nil)
	if row.recorded {
		wantReplay(t, again, first, "retry")
		if n := up.count("op"); n != 1 {
			t.Errorf("the upstream acted %d times, want 1", n)
		}
		return
	}
	if again.replayed() || again.Status != row.status {
		t.Errorf("retry: %d replayed=%v, want the upstream asked again", again.Status, again.replayed())
	}
	if n := up.count("op"); n != 2 {
		t.Errorf("the upstream was asked %d times, want 2 (the key released)", n)
	}
}

// An upstream that refuses the connection: 502 upstream-unreachable, with
// Retry-After, and nothing recorded: once the upstream listens, the retry
// with the same key is forwarded.
func TestGatewayUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	gw := startGateway(t, "http://"+addr)
	first := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil)
	if first.Status != http.StatusBadGateway || first.problemType() != gateway.ProblemUpstreamUnreachable || first.Header.Get("Retry-After") != "1" {
		t.Fatalf("first: %d %v %s, want 502 upstream-unreachable with Retry-After", first.Status, first.Header, first.Body)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	up := &testUpstream{effects: map[string]int{}}
	up.Server = httptest.NewUnstartedServer(http.HandlerFunc(up.serve))
	up.Listener = ln
	up.Start()
	defer up.Close()
	again := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil)
	if again.Status != http.StatusCreated || again.replayed() || up.count("op") != 1 {
		t.Fatalf("retry: %d replayed=%v (upstream reached %d times), want it forwarded", again.Status, again.replayed(), up.count("op"))
	}
}

// The upstream reads the request, acts, and cuts the connection without an
// answer: the effect may have happened, so the answer is 502
// outcome-unknown, recorded; the retry gets it replayed and the upstream is
// never asked again.
func TestGatewayResetAfterSendIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, hangUp)
	gw := startGateway(t, up.URL)
	first := send(t, "POST", gw+"/orders", "op", "k1", `{"n":1}`, nil)
	if first.Status != http.StatusBadGateway || first.problemType() != server.ProblemOutcomeUnknown || first.replayed() {
		t.Fatalf("first: %d %s, want 502 outcome-unknown", first.Status, first.Body)
	}
	wantReplay(t, send(t, "POST", gw+"/orders", "op", "k1", `{"n":1}`, nil), first, "retry")
	if n := up.count("op"); n != 1 {
		t.Errorf("the upstream acted %d times, want 1", n)
	}
}

// hangUp is an upstream that acts and then cuts the connection.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// With -upstream-dedupes the same lost answer releases the key: the retry is
// forwarded again, with the same key, for the upstream to deduplicate.
func TestGatewayDedupingUpstreamGetsTheRetry(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, hangUp)
	gw := startGateway(t, up.URL, "-upstream-dedupes")
	for i := range 2 {
		a := send(t, "POST", gw+"/orders", "op", "k1", `{"n":1}`, nil)
		if a.Status != http.StatusBadGateway || a.problemType() != gateway.ProblemUpstreamUnanswered || a.replayed() {
			t.Fatalf("attempt %d: %d %s, want 502 upstream-unanswered, not replayed", i, a.Status, a.Body)
		}
	}
	if n := up.count("op"); n != 2 {
		t.Fatalf("the upstream was asked %d times, want 2", n)
	}
	if k := up.last(t).Header.Get(server.HeaderKey); k != "k1" {
		t.Errorf("the retry reached the upstream with key %q, want k1", k)
	}
}

// An upstream slower than -upstream-timeout: 504 outcome-unknown, recorded.
func TestGatewayTimeoutAfterSendIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	t.Cleanup(func() { close(release) }) // before the upstream's Close, which waits for its handlers
	gw := startGateway(t, up.URL, "-upstream-timeout", "300ms")
	first := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil)
	if first.Status != http.StatusGatewayTimeout || first.problemType() != server.ProblemOutcomeUnknown {
		t.Fatalf("first: %d %s, want 504 outcome-unknown", first.Status, first.Body)
	}
	wantReplay(t, send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil), first, "retry")
	if n := up.count("op"); n != 1 {
		t.Errorf("the upstream was asked %d times, want 1", n)
	}
}

// An answer larger than -max-response-bytes cannot be recorded: after an
// effect (201) it is 502 outcome-unknown, recorded; after a refusal (422)
// the key is released and the retry forwarded.
func TestGatewayAnswerTooLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status   int
		wantType string
		asked    int // times the upstream is asked over two attempts
	}{
		{http.StatusCreated, server.ProblemOutcomeUnknown, 1},
		{http.StatusUnprocessableEntity, gateway.ProblemUpstreamTooLarge, 2},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(strings.Repeat("x", 1000)))
			})
			gw := startGateway(t, up.URL, "-max-response-bytes", "100")
			first := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil)
			if first.Status != http.StatusBadGateway || first.problemType() != tc.wantType {
				t.Fatalf("first: %d %s, want 502 %s", first.Status, first.Body, tc.wantType)
			}
			again := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil)
			if tc.asked == 1 {
				wantReplay(t, again, first, "retry")
			}
			if n := up.count("op"); n != tc.asked {
				t.Errorf("the upstream was asked %d times, want %d", n, tc.asked)
			}
		})
	}
}

// A client that goes away while the upstream works does not cut the
// upstream's call: its answer is recorded, and the retry (which waits for
// it) replays it.
func TestGatewayClientGoneMidForward(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		if err := r.Context().Err(); err != nil {
			t.Errorf("the upstream's request was cancelled: %v", err)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"o1"}`))
	})
	gw := startGateway(t, up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := trySend(ctx, "POST", gw+"/orders", "op", "k1", `{}`, nil)
		gone <- err
	}()
	<-arrived
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled client got an answer")
	}
	close(release)
	again := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil)
	if again.Status != http.StatusCreated || !again.replayed() || again.Body != `{"id":"o1"}` {
		t.Fatalf("retry: %d %q replayed=%v, want the upstream's answer replayed", again.Status, again.Body, again.replayed())
	}
	if n := up.count("op"); n != 1 {
		t.Errorf("the upstream acted %d times, want 1", n)
	}
}

// Regression: net/http's Transport sends a request again on a new
// connection when a connection it reused fails before the answer, and counts
// a request with an Idempotency-Key or X-Idempotency-Key header (and no body,
// or a body it can rewind) as replayable. An upstream that acted and then died
// on a reused connection would act twice. The upstream here cuts every
// connection's second request after acting; the gateway reuses its
// connections, so the test goes on until a request without a body and one
// with a body have each come second on a connection: the upstream acted once
// for every key, and the caller got outcome-unknown for those two. So it goes
// with the key forwarded under either name, and with an X-Idempotency-Key
// header of the caller's own forwarded as it is.
func TestGatewayNeverResendsOnANewConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		header string // a header of the caller's, its value the key
	}{
		{"Idempotency-Key", nil, ""},
		{"X-Idempotency-Key", []string{"-forward-key-header", "X-Idempotency-Key"}, ""},
		{"the caller's X-Idempotency-Key", []string{"-forward-key-header", "X-Request-Key"}, "X-Idempotency-Key"},
		{"the caller's, no key forwarded", []string{"-forward-key=false"}, "X-Idempotency-Key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newPerConnUpstream(t)
			gw := startGateway(t, up.URL, tc.args...)
			bodies := []string{"", "", `{"n":1}`, `{"n":2}`} // "" first, "" second, a body first, a body second
			var emptySecond, bodySecond bool
			for i := 0; !emptySecond || !bodySecond; i++ {
				if i == 40 {
					t.Fatalf("in %d requests, no request came second on a connection with an empty body (%v) or with a body (%v): "+
						"the gateway does not reuse its connections", i, emptySecond, bodySecond)
				}
				op, key, body := fmt.Sprint("op", i), fmt.Sprint("k", i), bodies[i%len(bodies)]
				h := http.Header{"Authorization": {"Bearer t1"}}
				if tc.header != "" {
					h.Set(tc.header, key)
				}
				a := send(t, "POST", gw+"/orders", op, key, body, h)
				up.wantOnce(t, op, body, a)
				if tc.header != "" && up.last(t).Header.Get(tc.header) != key {
					t.Errorf("%s: the upstream got %s %q, want the caller's %q", op, tc.header, up.last(t).Header.Get(tc.header), key)
				}
				if up.cameSecond(op) {
					emptySecond, bodySecond = emptySecond || body == "", bodySecond || body != ""
				}
			}
		})
	}
}

// The key reaches the upstream parsed (a quoted key unquoted), under
// -forward-key-header, or not at all with -forward-key=false.
func TestGatewayForwardsTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		header     string // where the upstream finds the key
		wantAbsent string
	}{
		{nil, server.HeaderKey, ""},
		{[]string{"-forward-key-header", "X-Request-Key"}, "X-Request-Key", server.HeaderKey},
		{[]string{"-forward-key=false"}, "", server.HeaderKey},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			up := newTestUpstream(t, nil)
			gw := startGateway(t, up.URL, tc.args...)
			send(t, "POST", gw+"/orders", "op", `"k-1"`, `{}`, nil)
			got := up.last(t).Header
			if tc.header != "" && got.Get(tc.header) != "k-1" {
				t.Errorf("%s = %q, want the parsed key k-1", tc.header, got.Get(tc.header))
			}
			if tc.wantAbsent != "" && got.Get(tc.wantAbsent) != "" {
				t.Errorf("the upstream got %s %q, want none", tc.wantAbsent, got.Get(tc.wantAbsent))
			}
			if tc.header == "" && got.Get(server.HeaderKey) != "" {
				t.Errorf("the upstream got the key with -forward-key=false")
			}
		})
	}
}

// The forwarding headers of a careful reverse proxy, on a protected and on
// an unprotected request: hop-by-hop headers removed (Connection and what it
// names, Keep-Alive, Proxy-Authorization, TE but trailers), X-Forwarded-For
// appended to, X-Forwarded-Host and -Proto set, the rest untouched.
func TestGatewayForwardingHeaders(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, nil)
	gw := startGateway(t, up.URL)
	for _, method := range []string{"POST", "GET"} {
		h := http.Header{
			"Connection":          {"X-Hop"},
			"X-Hop":               {"1"},
			"Keep-Alive":          {"timeout=5"},
			"Proxy-Authorization": {"Basic eDp5"},
			"Te":                  {"trailers"},
			"X-Forwarded-For":     {"203.0.113.9"},
			"X-Forwarded-Host":    {"spoofed.example"},
			"X-Custom":            {"a", "b"},
			"Authorization":       {"Bearer t1"},
		}
		send(t, method, gw+"/orders?x=1", "op-"+method, "k-"+method, `{}`, h)
		got := up.last(t)
		for _, gone := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization"} {
			if v := got.Header.Get(gone); v != "" {
				t.Errorf("%s: the upstream got %s %q", method, gone, v)
			}
		}
		host := strings.TrimPrefix(gw, "http://")
		if xff := got.Header.Get("X-Forwarded-For"); xff != "203.0.113.9, 127.0.0.1" {
			t.Errorf("%s: X-Forwarded-For %q, want the client's appended", method, xff)
		}
		if got.Header.Get("X-Forwarded-Host") != host || got.Header.Get("X-Forwarded-Proto") != "http" {
			t.Errorf("%s: X-Forwarded-Host %q -Proto %q, want %q and http", method, got.Header.Get("X-Forwarded-Host"),
				got.Header.Get("X-Forwarded-Proto"), host)
		}
		if got.Header.Get("Te") != "trailers" || strings.Join(got.Header["X-Custom"], ",") != "a,b" || got.URL.RawQuery != "x=1" {
			t.Errorf("%s: TE %q, X-Custom %q, query %q: want them as sent", method, got.Header.Get("Te"), got.Header["X-Custom"], got.URL.RawQuery)
		}
		if got.Host != strings.TrimPrefix(up.URL, "http://") {
			t.Errorf("%s: Host %q, want the upstream's", method, got.Host)
		}
		if method == "GET" && got.Header.Get(server.HeaderKey) != "k-GET" {
			t.Errorf("an unprotected request's Idempotency-Key reached the upstream as %q, want it untouched", got.Header.Get(server.HeaderKey))
		}
	}
}

// -protect selects what the middleware protects; everything else passes
// through, even without a key.
func TestGatewayProtectPatterns(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, nil)
	gw := startGateway(t, up.URL, "-protect", "POST /orders", "-protect", "PUT /items/{id},DELETE /items/{id}")
	for _, tc := range []struct {
		method, path string
		protected    bool
	}{
		{"POST", "/orders", true},
		{"POST", "/orders/", false}, // ServeMux: /orders is that path only
		{"POST", "/other", false},
		{"PATCH", "/orders", false},
		{"PUT", "/items/7", true},
		{"DELETE", "/items/7", true},
		{"GET", "/items/7", false},
	} {
		a := send(t, tc.method, gw+tc.path, "", "", `{}`, nil)
		if got := a.problemType() == server.ProblemMissingKey; got != tc.protected {
			t.Errorf("%s %s without a key: %d %s; protected %v, want %v", tc.method, tc.path, a.Status, a.Body, got, tc.protected)
		}
	}
}

// A GET pattern protects GET, not the HEAD that ServeMux would route to it.
func TestGatewayGetPatternLeavesHead(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	gw := startGateway(t, up.URL, "-protect", "GET /report")
	if a := send(t, "GET", gw+"/report", "", "", "", nil); a.problemType() != server.ProblemMissingKey {
		t.Errorf("GET /report without a key: %d, want 400 missing-key", a.Status)
	}
	if a := send(t, "HEAD", gw+"/report", "", "", "", nil); a.Status != http.StatusOK {
		t.Errorf("HEAD /report: %d, want it passed through", a.Status)
	}
}

// Keys are scoped by the Authorization header by default, by -scope-header
// when given; a request without the scope is 401 and reaches nobody.
func TestGatewayScopes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		header string
	}{
		{nil, "Authorization"},
		{[]string{"-scope-header", "X-Tenant"}, "X-Tenant"},
	} {
		t.Run(tc.header, func(t *testing.T) {
			t.Parallel()
			up := newTestUpstream(t, nil)
			gw := startGateway(t, up.URL, tc.args...)
			as := func(v string) http.Header {
				h := http.Header{"Authorization": {"Bearer t1"}}
				if v == "" {
					delete(h, tc.header)
				} else {
					h.Set(tc.header, v)
				}
				return h
			}
			if a := send(t, "POST", gw+"/orders", "op", "k1", `{}`, as("")); a.Status != http.StatusUnauthorized ||
				a.problemType() != server.ProblemUnauthenticated {
				t.Errorf("without %s: %d %s, want 401", tc.header, a.Status, a.Body)
			}
			a1 := send(t, "POST", gw+"/orders", "op", "k1", `{}`, as("Bearer alice"))
			b1 := send(t, "POST", gw+"/orders", "op", "k1", `{}`, as("Bearer bob"))
			if a1.replayed() || b1.replayed() || a1.Body == b1.Body {
				t.Errorf("two scopes with one key: %q and %q, want two executions", a1.Body, b1.Body)
			}
			wantReplay(t, send(t, "POST", gw+"/orders", "op", "k1", `{}`, as("Bearer alice")), a1, "alice again")
			if n := up.count("op"); n != 2 {
				t.Errorf("the upstream acted %d times, want 2", n)
			}
		})
	}
}

// The gateway's own endpoints are under /_idem/; every other path, /metrics
// included, is the upstream's.
func TestGatewayOwnEndpoints(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("upstream " + r.URL.Path)) })
	gw := startGateway(t, up.URL)
	for path, want := range map[string]string{
		gateway.LivezPath:  "ok\n",
		gateway.ReadyzPath: "ready\n",
		"/metrics":         "upstream /metrics",
		"/livez":           "upstream /livez",
		"//x/../y":         "upstream //x/../y",
	} {
		if a := send(t, "GET", gw+path, "", "", "", nil); a.Status != http.StatusOK || a.Body != want {
			t.Errorf("GET %s: %d %q, want %q", path, a.Status, a.Body, want)
		}
	}
	if a := send(t, "GET", gw+gateway.MetricsPath, "", "", "", nil); a.Status != http.StatusOK || !strings.Contains(a.Body, "http_server_request_duration") {
		t.Errorf("GET %s: %d, want the gateway's metrics", gateway.MetricsPath, a.Status)
	}
}

// -chaos applies the faults to the protected requests: Chaos-Fail answers
// without asking the upstream; Chaos-Drop cuts the answer after the record,
// and the retry replays it; no Chaos-* header reaches the upstream.
func TestGatewayChaos(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, nil)
	gw := startGateway(t, up.URL, "-chaos")
	if a := send(t, "POST", gw+"/orders", "failed", "k0", `{}`, http.Header{"Chaos-Fail": {"503"}, "Authorization": {"Bearer t1"}}); a.Status != 503 || up.count("failed") != 0 {
		t.Errorf("Chaos-Fail: %d, upstream asked %d times; want 503 and none", a.Status, up.count("failed"))
	}
	if _, err := trySend(context.Background(), "POST", gw+"/orders", "op", "k1", `{}`, http.Header{"Chaos-Drop": {"after-record"}, "Authorization": {"Bearer t1"}}); err == nil {
		t.Fatal("Chaos-Drop: an answer arrived")
	}
	if a := send(t, "POST", gw+"/orders", "op", "k1", `{}`, nil); !a.replayed() || a.Status != http.StatusCreated {
		t.Errorf("retry after the drop: %d replayed=%v, want the recorded 201", a.Status, a.replayed())
	}
	if n := up.count("op"); n != 1 {
		t.Errorf("the upstream acted %d times, want 1", n)
	}
	if v := up.last(t).Header.Get("Chaos-Drop"); v != "" {
		t.Errorf("the upstream got Chaos-Drop %q", v)
	}
}

// A store that cannot mark the effect: 503 store-unavailable, and the
// request never leaves.
func TestGatewayStoreCannotMark(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, nil)
	c, err := parseFlags([]string{"-upstream", up.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(c.gateway, failingMarks{memstore.New()}, chaos.New(chaos.WithHeaders(false)), false, nil)
	srv := httptest.NewServer(g)
	defer srv.Close()
	a := send(t, "POST", srv.URL+"/orders", "op", "k1", `{}`, nil)
	if a.Status != http.StatusServiceUnavailable || a.problemType() != server.ProblemStoreUnavailable || up.count("op") != 0 {
		t.Fatalf("%d %s, upstream asked %d times; want 503 store-unavailable and no forward", a.Status, a.Body, up.count("op"))
	}
	if a := send(t, "POST", srv.URL+"/orders", "op", "k1", `{}`, nil); a.Status != http.StatusServiceUnavailable || a.replayed() {
		t.Errorf("retry: %d replayed=%v, want the key released (503 again, not replayed)", a.Status, a.replayed())
	}
}

// failingMarks is a store whose effect marks always fail.
type failingMarks struct{ server.Store }

func (s failingMarks) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	return s.Store.Do(ctx, req, func(ctx context.Context) (*server.Response, bool) {
		return run(server.ContextWithEffectMark(ctx, func(context.Context) error { return fmt.Errorf("store down") }))
	})
}

// readHTTP reads one HTTP/1.1 response from br (for the raw connection
// tests).
func readHTTP(t *testing.T, br *bufio.Reader, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
