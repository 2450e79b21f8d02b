package idem

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connCounter counts a server's open connections through its ConnState hook.
type connCounter struct {
	mu   sync.Mutex
	open map[net.Conn]bool
}

func (c *connCounter) hook(conn net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew:
		c.open[conn] = true
	case http.StateClosed, http.StateHijacked:
		delete(c.open, conn)
	}
}

func (c *connCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// TestNoLeaksAfterFaults runs stalled, cancelled, timed-out and reset attempts
// over real servers, HTTP/1.1 and HTTP/2, then checks that no connection is
// left open once the client closes its idle ones, and that the goroutines
// come back to their number before. It is not parallel: it counts goroutines.
func TestNoLeaksAfterFaults(t *testing.T) {
	before := goroutines()
	for _, h2 := range []bool{false, true} {
		var n, holding atomic.Int32
		quit := make(chan struct{})
		// hold keeps a request until its client leaves, or the test lets it go.
		hold := func(r *http.Request) {
			holding.Add(1)
			defer holding.Add(-1)
			select {
			case <-r.Context().Done():
			case <-quit:
			}
		}
		conns := &connCounter{open: map[net.Conn]bool{}}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			switch r.URL.Path {
			case "/stall": // a 503 whose body never ends
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "partial")
				_ = http.NewResponseController(w).Flush()
				hold(r)
			case "/hang": // no answer at all
				hold(r)
			case "/reset": // the first attempt is reset
				if n.Add(1) == 1 {
					panic(http.ErrAbortHandler)
				}
			}
		}))
		srv.Config.ConnState = conns.hook
		srv.Config.ErrorLog = nil
		var base http.RoundTripper
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
			base = srv.Client().Transport
		} else {
			srv.Start()
			base = &http.Transport{}
		}
		tr := NewTransport(base, WithBackoff(10*time.Millisecond, 10*time.Millisecond))
		do := func(ctx context.Context, path string, opts ...Option) {
			t.Helper()
			tr := tr
			if len(opts) > 0 {
				tr = NewTransport(base, append([]Option{WithBackoff(10*time.Millisecond, 10*time.Millisecond)}, opts...)...)
			}
			resp, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodPost, srv.URL+path, "{}"))
			if err == nil {
				_ = resp.Body.Close()
			}
		}
		do(context.Background(), "/stall", WithMaxElapsed(300*time.Millisecond))
		// The attempts run out at about 150ms; the late ones are waited for
		// until the cap.
		do(context.Background(), "/hang", WithAttemptTimeout(50*time.Millisecond), WithMaxAttempts(3), WithMaxElapsed(500*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		do(ctx, "/hang")
		do(context.Background(), "/reset")
		tr.CloseIdleConnections()
		srv.Client().Transport.(*http.Transport).CloseIdleConnections()
		if t2, ok := base.(*http.Transport); ok {
			t2.CloseIdleConnections()
		}
		// Every client has left its held request: RoundTrip let go of what
		// it did not return. Bounded, so that a request left running fails
		// here instead of hanging srv.Close.
		assert.Eventually(t, func() bool { return holding.Load() == 0 }, 5*time.Second, 10*time.Millisecond,
			"h2=%v: %d requests still held after every RoundTrip returned: their attempts were never cancelled", h2, holding.Load())
		close(quit)
		srv.Close() // waits for the handlers
		require.Eventually(t, func() bool { return conns.count() == 0 }, 5*time.Second, 10*time.Millisecond,
			"h2=%v: %d connections left open", h2, conns.count())
	}
	// Polled here, not with assert.Eventually, whose own goroutines would count.
	after := goroutines()
	for end := time.Now().Add(5 * time.Second); after > before && time.Now().Before(end); after = goroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	if !assert.LessOrEqual(t, after, before, "goroutines left running") {
		buf := make([]byte, 1<<16)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
}

// goroutines counts the program's goroutines as a stack dump shows them
// (runtime.NumGoroutine also counts ones the runtime starts lazily).
func goroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "\ngoroutine ") + 1
}
