package main

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// Protected POSTs, with a body and without, reuse the gateway's connections
// to the upstream: twenty of them one after another open far fewer than
// twenty (one, unless the gateway asks for the next before the last is back
// in its pool). A protected GET goes on a new connection each time, since
// net/http would send it again after a reused connection failed whatever its
// headers say: twenty GETs, twenty connections.
func TestGatewayReusesUpstreamConnections(t *testing.T) {
	t.Parallel()
	const n = 20
	for _, tc := range []struct {
		method string
		args   []string
		reused bool
	}{
		{"POST", nil, true},
		{"GET", []string{"-protect", "GET /orders"}, false},
	} {
		t.Run(tc.method, func(t *testing.T) {
			t.Parallel()
			up := newTestUpstream(t, nil)
			gw := startGateway(t, up.URL, tc.args...)
			for i := range n {
				body := ""
				if tc.method == "POST" && i%2 == 1 {
					body = fmt.Sprintf(`{"n":%d}`, i)
				}
				op := fmt.Sprint("op", i)
				a := send(t, tc.method, gw+"/orders", op, fmt.Sprint("k", i), body, nil)
				if a.Status != http.StatusCreated || a.replayed() {
					t.Fatalf("request %d: %d %s, want the upstream's 201", i, a.Status, a.Body)
				}
				if got := up.bodyOf(op); got != body {
					t.Errorf("request %d: the upstream got the body %q, want %q", i, got, body)
				}
			}
			switch got := up.accepted(); {
			case tc.reused && got > n/4:
				t.Errorf("%d protected %ss opened %d connections to the upstream, want them reused", n, tc.method, got)
			case !tc.reused && got != n:
				t.Errorf("%d protected %ss opened %d connections to the upstream, want one each", n, tc.method, got)
			}
		})
	}
}

// An upstream that has closed an idle connection, by closing every connection
// after its answer (keep-alive, without saying "Connection: close") or by an
// idle time-out, costs nothing: each protected request after such a close
// gets through once, on another connection, and none is answered
// outcome-unknown. The test waits for the upstream's close before sending
// the next request, so that every request meets a connection the upstream
// has closed.
func TestGatewayUpstreamClosedIdleConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"closes after its answer", "idle time-out"} {
		t.Run(tc, func(t *testing.T) {
			t.Parallel()
			closed := make(chan struct{}, 1)
			up := &testUpstream{effects: map[string]int{}}
			if tc == "closes after its answer" {
				up.answer = func(w http.ResponseWriter, r *http.Request) {
					conn, buf, err := http.NewResponseController(w).Hijack()
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = buf.WriteString("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
					_ = buf.Flush()
					conn.Close()
					closed <- struct{}{}
				}
			}
			srv := &http.Server{Handler: http.HandlerFunc(up.serve)}
			if tc == "idle time-out" {
				srv.IdleTimeout = time.Millisecond
				srv.ConnState = func(_ net.Conn, state http.ConnState) {
					if state == http.StateClosed {
						closed <- struct{}{}
					}
				}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
			gw := startGateway(t, "http://"+ln.Addr().String())
			for i := range 10 {
				body := ""
				if i%2 == 1 {
					body = fmt.Sprintf(`{"n":%d}`, i)
				}
				op := fmt.Sprint("op", i)
				a := send(t, "POST", gw+"/orders", op, fmt.Sprint("k", i), body, nil)
				if a.Status != http.StatusCreated || a.replayed() {
					t.Fatalf("request %d: %d %s, want the upstream's 201", i, a.Status, a.Body)
				}
				if n := up.count(op); n != 1 {
					t.Errorf("request %d: the upstream acted %d times, want 1", i, n)
				}
				<-closed
			}
		})
	}
}

// bodyOf returns the body of the last request for op the upstream received.
func (u *testUpstream) bodyOf(op string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := len(u.received) - 1; i >= 0; i-- {
		if u.received[i].Header.Get("X-Op") == op {
			return u.bodies[i]
		}
	}
	return ""
}

// perConnUpstream is an upstream that numbers the requests of each
// connection: it acts on each (counting it by X-Op), answers the first on
// a connection 201, and cuts the connection without an answer after acting
// on any later one: an upstream that acted and then died, on a connection
// the gateway reused.
type perConnUpstream struct {
	*testUpstream
	mu      sync.Mutex
	perConn map[string]int
	second  map[string]bool // the ops that came second or later on their connection
}

func newPerConnUpstream(t *testing.T) *perConnUpstream {
	p := &perConnUpstream{perConn: map[string]int{}, second: map[string]bool{}}
	p.testUpstream = newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.perConn[r.RemoteAddr]++
		again := p.perConn[r.RemoteAddr] > 1
		p.second[r.Header.Get("X-Op")] = again
		p.mu.Unlock()
		if again {
			hangUp(w, r)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	return p
}

// cameSecond reports whether op reached the upstream on a connection that
// had carried a request before.
func (p *perConnUpstream) cameSecond(op string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.second[op]
}

// wantOnce checks the answer a of protected request op to a perConnUpstream:
// the upstream acted once, and the caller got its 201 when it came first on
// its connection, outcome-unknown when the upstream died after acting.
func (p *perConnUpstream) wantOnce(t *testing.T, op, body string, a answer) {
	t.Helper()
	if n := p.count(op); n != 1 {
		t.Errorf("%s (body %q): the upstream acted %d times, want 1", op, body, n)
	}
	switch {
	case p.cameSecond(op) && a.problemType() != server.ProblemOutcomeUnknown:
		t.Errorf("%s (body %q): %d %s after the upstream acted and died, want outcome-unknown", op, body, a.Status, a.Body)
	case !p.cameSecond(op) && a.Status != http.StatusCreated:
		t.Errorf("%s (body %q): %d %s, want the upstream's 201", op, body, a.Status, a.Body)
	}
}
