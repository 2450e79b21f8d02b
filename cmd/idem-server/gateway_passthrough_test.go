package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
)

// An unprotected stream is passed on as the upstream flushes it: the first
// event reaches the client while the upstream still holds the second.
func TestGatewayPassThroughStreams(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		http.NewResponseController(w).Flush()
		<-second
		_, _ = io.WriteString(w, "data: 2\n\n")
	})
	t.Cleanup(func() {
		select {
		case <-second:
		default:
			close(second)
		}
	})
	gw := startGateway(t, up.URL)
	resp, err := gatewayClient.Get(gw + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 1\n" {
		t.Fatalf("first event: %q, %v; want it before the upstream finishes", line, err)
	}
	close(second)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: 2\n\n" {
		t.Errorf("the rest of the stream: %q", rest)
	}
}

// A WebSocket upgrade of an unprotected route is passed through: 101, then
// the bytes both ways.
func TestGatewayPassThroughUpgrades(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || !strings.EqualFold(r.Header.Get("Connection"), "Upgrade") {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	})
	gw := startGateway(t, up.URL)
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequest("GET", gw+"/socket", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp := readHTTP(t, br, req)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "websocket" {
		t.Fatalf("upgrade: %d %v, want 101 websocket", resp.StatusCode, resp.Header)
	}
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo hello\n" {
		t.Fatalf("over the upgraded connection: %q, %v", line, err)
	}
}

// A protected request that asks for an upgrade is forwarded without it: a
// switched connection could not be recorded.
func TestGatewayProtectedRequestDoesNotUpgrade(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, nil)
	gw := startGateway(t, up.URL)
	a := send(t, "POST", gw+"/socket", "op", "k1", `{}`, map[string][]string{"Authorization": {"Bearer t1"},
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
	if a.Status != http.StatusCreated {
		t.Fatalf("%d %s, want the upstream's 201", a.Status, a.Body)
	}
	if h := up.last(t).Header; h.Get("Upgrade") != "" || strings.Contains(strings.ToLower(h.Get("Connection")), "upgrade") {
		t.Errorf("the upstream got Upgrade %q Connection %q", h.Get("Upgrade"), h.Get("Connection"))
	}
}

// An unprotected stream outlives the server's write and read time-outs,
// which bound protected requests only: here a server with 200 ms time-outs
// passes a stream of 600 ms.
func TestGatewayPassThroughOutlivesTheServerTimeouts(t *testing.T) {
	t.Parallel()
	tick := make(chan struct{})
	up := newTestUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			_, _ = io.WriteString(w, "tick\n")
			http.NewResponseController(w).Flush()
			if i < 2 {
				select {
				case <-tick:
				case <-r.Context().Done(): // the gateway gave up
					return
				}
			}
		}
	})
	c, err := parseFlags([]string{"-upstream", up.URL}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(newGateway(c.gateway, memstore.New(), chaos.New(), false))
	srv.Config.WriteTimeout, srv.Config.ReadTimeout = 200*time.Millisecond, 200*time.Millisecond
	srv.Start()
	defer srv.Close()
	resp, err := gatewayClient.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		if line, err := br.ReadString('\n'); err != nil || line != "tick\n" {
			t.Fatalf("tick %d: %q, %v", i, line, err)
		}
		if i < 2 {
			time.Sleep(300 * time.Millisecond) // past the server's time-outs: the passing of time is what is tested
			select {
			case tick <- struct{}{}:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream stopped streaming")
			}
		}
	}
}
