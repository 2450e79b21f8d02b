//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// closingAnswer is the answer of closingUpstream: kept alive (no
// "Connection: close"), and then closed all the same.
const closingAnswer = "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"

// The upstream closes the connection after its answer, and the gateway's
// Transport has not read the close yet (its reader is held back, as on a busy
// machine) when the next protected request takes that connection from the
// pool. The request must not be written there (the upstream's reset would
// make it outcome-unknown though the upstream never read it): it goes on a
// new connection and gets the upstream's answer, once. When the upstream
// cannot be reached any more, nothing was sent: upstream-unreachable, the
// key released, not outcome-unknown.
func TestGatewayReusedConnectionTheUpstreamClosed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body string
		gone bool // the upstream stops listening after the first answer
	}{
		{"no body", "", false},
		{"a body", `{"n":2}`, false},
		{"a body, the upstream gone", `{"n":2}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newClosingUpstream(t)
			var conns stallConns
			t.Cleanup(conns.free)
			gw := startStallGateway(t, up.URL, &conns)

			if a := post(t, gw, "k1", "op1", `{"n":1}`); a.Code != http.StatusCreated {
				t.Fatalf("first: %d %s, want the upstream's 201", a.Code, a.Body)
			}
			<-up.closed
			first := conns.get(0)
			waitReadable(t, first.TCPConn) // the upstream's FIN, unread by the Transport
			written := first.written.Load()
			if tc.gone {
				up.Listener.Close()
			}

			a := post(t, gw, "k2", "op2", tc.body)
			if first.written.Load() != written {
				t.Errorf("the second request was written on the connection the upstream had closed")
			}
			if tc.gone {
				if a.Code != http.StatusBadGateway || problemType(a) != ProblemUpstreamUnreachable {
					t.Fatalf("second: %d %s, want 502 upstream-unreachable", a.Code, a.Body)
				}
				if again := post(t, gw, "k2", "op2", tc.body); again.Header().Get(server.HeaderReplayed) != "" {
					t.Errorf("retry: %d %s replayed, want the key released", again.Code, again.Body)
				}
				return
			}
			if a.Code != http.StatusCreated {
				t.Fatalf("second: %d %s, want the upstream's 201", a.Code, a.Body)
			}
			if n := up.count("op2"); n != 1 {
				t.Errorf("the upstream acted %d times on the second request, want 1", n)
			}
			if got := up.body("op2"); got != tc.body {
				t.Errorf("the upstream got the body %q, want %q", got, tc.body)
			}
		})
	}
}

// peerGone tells a live idle connection from one the peer closed, reset or
// sent bytes on, and takes nothing from it.
func TestPeerGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		peer func(c *net.TCPConn)
		gone bool
	}{
		{"idle", nil, false},
		{"closed", func(c *net.TCPConn) { c.Close() }, true},
		{"reset", func(c *net.TCPConn) { _ = c.SetLinger(0); c.Close() }, true},
		{"unsolicited bytes", func(c *net.TCPConn) { _, _ = c.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours, theirs := tcpPair(t)
			if tc.peer != nil {
				tc.peer(theirs)
				waitReadable(t, ours)
			}
			if got := peerGone(ours); got != tc.gone {
				t.Fatalf("peerGone = %v, want %v", got, tc.gone)
			}
			if tc.name == "unsolicited bytes" {
				b := make([]byte, 8)
				if n, _ := ours.Read(b); string(b[:n]) != "HTTP/1.1" {
					t.Errorf("after peerGone, the connection reads %q, want the bytes still there", b[:n])
				}
			}
		})
	}
}

// closingUpstream counts each request by its X-Op header, keeps its body,
// answers closingAnswer and closes the connection, then says so on closed.
type closingUpstream struct {
	*httptest.Server
	closed  chan struct{}
	mu      sync.Mutex
	effects map[string]int
	bodies  map[string]string
}

func newClosingUpstream(t *testing.T) *closingUpstream {
	u := &closingUpstream{closed: make(chan struct{}, 1), effects: map[string]int{}, bodies: map[string]string{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.effects[r.Header.Get("X-Op")]++
		u.bodies[r.Header.Get("X-Op")] = string(body)
		u.mu.Unlock()
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = buf.WriteString(closingAnswer)
		_ = buf.Flush()
		conn.Close()
		u.closed <- struct{}{}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *closingUpstream) count(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.effects[op]
}

func (u *closingUpstream) body(op string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bodies[op]
}

// startStallGateway returns a gateway in front of upstream on the memory
// store whose connections to the upstream are stallConns, kept in conns.
func startStallGateway(t *testing.T, upstream string, conns *stallConns) http.Handler {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc := &stallConn{TCPConn: c.(*net.TCPConn), after: int64(len(closingAnswer)), release: make(chan struct{})}
		conns.add(sc)
		return sc, nil
	}
	g, err := newGateway(Config{Upstream: u, UpstreamTimeout: 10 * time.Second, ForwardKey: true}, memstore.New(), dial)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// post sends a protected POST to the gateway.
func post(t *testing.T, gw http.Handler, key, op, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer t1")
	req.Header.Set(server.HeaderKey, key)
	req.Header.Set("X-Op", op)
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, req)
	return rec
}

func problemType(rec *httptest.ResponseRecorder) string {
	var p struct{ Type string }
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	return p.Type
}

// stallConn is a connection to the upstream whose reads stop once the first
// answer (after bytes) has been read, until a byte of the next request is
// written on it or it is closed: the Transport's reader is held back, so that
// the upstream's close waits unread in the socket when the next request
// takes the connection.
type stallConn struct {
	*net.TCPConn
	after   int64
	read    atomic.Int64
	once    sync.Once
	release chan struct{}
	written atomic.Int64
}

func (c *stallConn) Read(p []byte) (int, error) {
	if c.read.Load() >= c.after {
		<-c.release
	}
	n, err := c.TCPConn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// Write frees the held-back reader once a write that began after the answer
// was read (the next request) has written something. Whether the answer was
// read is looked at before the write: the first request's last write may
// return only after its answer was read, and must not free the reader.
func (c *stallConn) Write(p []byte) (int, error) {
	answered := c.read.Load() >= c.after
	n, err := c.TCPConn.Write(p)
	c.written.Add(int64(n))
	if n > 0 && answered {
		c.free()
	}
	return n, err
}

func (c *stallConn) Close() error {
	c.free()
	return c.TCPConn.Close()
}

func (c *stallConn) free() { c.once.Do(func() { close(c.release) }) }

// stallConns are the connections a stall gateway dialed, in order.
type stallConns struct {
	mu    sync.Mutex
	conns []*stallConn
}

func (s *stallConns) add(c *stallConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, c)
}

func (s *stallConns) get(i int) *stallConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[i]
}

// free closes every connection, which ends the Transport's readers.
func (s *stallConns) free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// waitReadable waits until c has something to read (bytes, its end, an
// error), without reading it: the netpoller wakes it, nothing polls.
func waitReadable(t *testing.T, c *net.TCPConn) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EWOULDBLOCK)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (ours, theirs *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-accepted
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); a.Close() })
	return c.(*net.TCPConn), a.(*net.TCPConn)
}
