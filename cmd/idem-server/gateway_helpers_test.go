package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// testUpstream is an API the gateway does not own: it counts each request it
// receives (its effects) by the X-Op header the test sends, and the
// connections it accepts, keeps what it received, and answers as answer says
// (201 with a JSON body of a fresh id when answer is nil).
type testUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	effects  map[string]int
	conns    int
	received []*http.Request // clones, with Body read into bodies
	bodies   []string
	answer   func(w http.ResponseWriter, r *http.Request)
	seq      int
}

func newTestUpstream(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *testUpstream {
	t.Helper()
	u := &testUpstream{effects: map[string]int{}, answer: answer}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			u.mu.Lock()
			u.conns++
			u.mu.Unlock()
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// accepted returns how many connections the upstream has accepted.
func (u *testUpstream) accepted() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns
}

func (u *testUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.effects[r.Header.Get("X-Op")]++
	u.received = append(u.received, r.Clone(context.Background()))
	u.bodies = append(u.bodies, string(body))
	u.seq++
	n := u.seq
	answer := u.answer
	u.mu.Unlock()
	if answer != nil {
		answer(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/"+strconv.Itoa(n))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": n, "op": r.Header.Get("X-Op")})
}

// count returns how many times op reached the upstream.
func (u *testUpstream) count(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.effects[op]
}

// last returns the last request the upstream received.
func (u *testUpstream) last(t *testing.T) *http.Request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.received) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return u.received[len(u.received)-1]
}

// startGateway runs idem-server in-process as a gateway in front of upstream
// and returns its URL.
func startGateway(t *testing.T, upstream string, args ...string) string {
	t.Helper()
	url, _, _ := startRun(t, append([]string{"-upstream", upstream}, args...)...)
	return url
}

// answer is a response read whole.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

func (a answer) replayed() bool { return a.Header.Get(server.HeaderReplayed) == "true" }

// problemType is the type of a problem+json answer, or "".
func (a answer) problemType() string {
	var p struct{ Type string }
	if a.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(a.Body), &p) != nil {
		return ""
	}
	return p.Type
}

// send sends a request to the gateway, op in X-Op, key (if any) as the
// Idempotency-Key, h's headers or, when h is nil, a bearer token t1, and
// returns the answer or fails the test.
func send(t *testing.T, method, url, op, key, body string, h http.Header) answer {
	t.Helper()
	a, err := trySend(context.Background(), method, url, op, key, body, h)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// gatewayClient is the tests' client: no keep-alive, so that a connection
// the gateway cut fails its request instead of being retried on another.
// It follows no redirect: the tests read the upstream's own.
var gatewayClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func trySend(ctx context.Context, method, url, op, key, body string, h http.Header) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if h == nil {
		req.Header.Set("Authorization", "Bearer t1")
	}
	if op != "" {
		req.Header.Set("X-Op", op)
	}
	if key != "" {
		req.Header.Set(server.HeaderKey, key)
	}
	resp, err := gatewayClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, err
}

// wantReplay checks that again replays first byte for byte.
func wantReplay(t *testing.T, again, first answer, what string) {
	t.Helper()
	if !again.replayed() || again.Status != first.Status || again.Body != first.Body {
		t.Errorf("%s: %d %q (replayed %v), want the first answer %d %q replayed", what, again.Status, again.Body,
			again.replayed(), first.Status, first.Body)
	}
}
