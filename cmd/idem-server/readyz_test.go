package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testkit/tcpproxy"
)

// Regression: /readyz answered 200 with the store down, though the command's
// documentation promises 503: neither durable store implemented
// server.Pinger. The binary now answers 503 while its store cannot be
// reached, and 200 again once it can.
func TestBinaryReadyzTellsWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := startPrivateRedis(t)
		p := startBinary(t, "-store", "redis", "-redis-addr", srv.addr)
		waitReady(t, p.url, http.StatusOK, "with Redis up")
		srv.kill()
		waitReady(t, p.url, http.StatusServiceUnavailable, "with Redis stopped")
		srv.start()
		waitReady(t, p.url, http.StatusOK, "with Redis back")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pg, err := url.Parse(postgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", privateAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		proxy := tcpproxy.Start(t, ln, pg.Host)
		pg.Host = proxy.Addr
		p := startBinary(t, "-store", "postgres", "-postgres-url", pg.String())
		waitReady(t, p.url, http.StatusOK, "with PostgreSQL up")
		proxy.Close()
		waitReady(t, p.url, http.StatusServiceUnavailable, "with PostgreSQL cut off")
	})
}

// waitReady polls GET /readyz until it answers want, failing after 15 s.
// Each answer comes within the check's own bound; the polling only waits for
// the server to notice the change (a pooled connection found dead).
func waitReady(t *testing.T, base string, want int, what string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := c.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			last = resp.Status + " " + string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(20 * time.Millisecond) // polling the endpoint for a state change
	}
	t.Fatalf("/readyz %s: %s, want %d", what, last, want)
}
