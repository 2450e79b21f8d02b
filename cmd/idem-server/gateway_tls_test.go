package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
)

// tlsUpstream is a testUpstream served over TLS, offering HTTP/2 too, with
// its certificate in a PEM file for -upstream-ca; closed gets a value each
// time the upstream closes a connection.
type tlsUpstream struct {
	*testUpstream
	caFile string
	closed chan struct{}
}

func newTLSUpstream(t *testing.T, configure func(*http.Server)) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{testUpstream: &testUpstream{effects: map[string]int{}}, closed: make(chan struct{}, 100)}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.EnableHTTP2 = true
	u.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		switch state {
		case http.StateNew:
			u.mu.Lock()
			u.conns++
			u.mu.Unlock()
		case http.StateClosed:
			u.closed <- struct{}{}
		}
	}
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshakes
	if configure != nil {
		configure(u.Config)
	}
	u.StartTLS()
	t.Cleanup(u.Close)
	u.caFile = filepath.Join(t.TempDir(), "ca.pem")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.Certificate().Raw})
	if err := os.WriteFile(u.caFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	return u
}

// In front of an https upstream whose CA is given by -upstream-ca, the
// gateway keeps the contract as over plain HTTP: a protected request reaches
// the upstream once, over TLS and HTTP/1.1, and its retry is replayed;
// protected requests share kept-alive TLS connections; an unprotected
// request passes through over HTTP/2, which the upstream offers.
func TestGatewayTLSUpstream(t *testing.T) {
	t.Parallel()
	up := newTLSUpstream(t, nil)
	gw := startGateway(t, up.URL, "-upstream-ca", up.caFile)
	first := send(t, "POST", gw+"/orders", "pay", "k1", `{"amount":1}`, nil)
	if first.Status != http.StatusCreated || first.replayed() {
		t.Fatalf("first: %d %s, want the upstream's 201", first.Status, first.Body)
	}
	if r := up.last(t); r.TLS == nil || r.Proto != "HTTP/1.1" {
		t.Errorf("the protected request reached the upstream over %s, TLS %v; want HTTP/1.1 over TLS", r.Proto, r.TLS != nil)
	}
	wantReplay(t, send(t, "POST", gw+"/orders", "pay", "k1", `{"amount":1}`, nil), first, "the retry")
	if n := up.count("pay"); n != 1 {
		t.Errorf("the upstream acted %d times, want 1", n)
	}
	const n = 20
	for i := range n {
		a := send(t, "POST", gw+"/orders", fmt.Sprint("op", i), fmt.Sprint("key", i), "", nil)
		if a.Status != http.StatusCreated || a.replayed() {
			t.Fatalf("request %d: %d %s, want the upstream's 201", i, a.Status, a.Body)
		}
	}
	if got := up.accepted(); got > n/4 {
		t.Errorf("%d protected POSTs opened %d TLS connections to the upstream, want them reused", n, got)
	}
	if a := send(t, "GET", gw+"/orders/1", "list", "", "", nil); a.Status != http.StatusCreated {
		t.Fatalf("pass-through: %d %s", a.Status, a.Body)
	}
	if r := up.last(t); r.TLS == nil || r.Proto != "HTTP/2.0" {
		t.Errorf("the unprotected request reached the upstream over %s, TLS %v; want HTTP/2.0 over TLS", r.Proto, r.TLS != nil)
	}
}

// An https upstream that closes each connection once idle (a TLS alert,
// then its FIN) costs nothing: each protected request after such a close
// gets through once, on another connection, and none is answered
// outcome-unknown. The test waits for the upstream's close before each next
// request, so that every request comes after one. (Here the Transport's
// reader sees the close first; the look the gateway takes at a reused
// connection before writing on it, for a close its reader has not seen yet,
// is TestGatewayReusedConnectionTheUpstreamClosed's, in cmd/idem-server/gateway.)
func TestGatewayTLSUpstreamClosedIdleConnection(t *testing.T) {
	t.Parallel()
	up := newTLSUpstream(t, func(s *http.Server) { s.IdleTimeout = 1 })
	gw := startGateway(t, up.URL, "-upstream-ca", up.caFile)
	for i := range 10 {
		op := fmt.Sprint("op", i)
		a := send(t, "POST", gw+"/orders", op, fmt.Sprint("k", i), fmt.Sprintf(`{"n":%d}`, i), nil)
		if a.Status != http.StatusCreated || a.replayed() {
			t.Fatalf("request %d: %d %s, want the upstream's 201", i, a.Status, a.Body)
		}
		if n := up.count(op); n != 1 {
			t.Errorf("request %d: the upstream acted %d times, want 1", i, n)
		}
		<-up.closed
	}
}

// An upstream whose certificate the gateway does not trust (no -upstream-ca,
// and not signed by a CA of the system's) never sees a request: a protected
// request is answered 502 upstream-unreachable, nothing is recorded, and its
// retry gets the same answer, not a replay or an outcome-unknown; an
// unprotected one is 502 too.
func TestGatewayTLSUpstreamUntrusted(t *testing.T) {
	t.Parallel()
	up := newTLSUpstream(t, nil)
	gw := startGateway(t, up.URL)
	for _, what := range []string{"first", "retry"} {
		a := send(t, "POST", gw+"/orders", "pay", "k1", `{"amount":1}`, nil)
		if a.Status != http.StatusBadGateway || a.replayed() || a.problemType() != gateway.ProblemUpstreamUnreachable {
			t.Errorf("%s: %d %s (replayed %v), want 502 %s", what, a.Status, a.Body, a.replayed(), gateway.ProblemUpstreamUnreachable)
		}
	}
	if a := send(t, "GET", gw+"/orders", "list", "", "", nil); a.Status != http.StatusBadGateway {
		t.Errorf("pass-through: %d %s, want 502", a.Status, a.Body)
	}
	if n := up.accepted(); n == 0 {
		t.Error("the gateway never connected: the test shows nothing")
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.received) != 0 {
		t.Errorf("the upstream received %d requests, want none", len(up.received))
	}
}
