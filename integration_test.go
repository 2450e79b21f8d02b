package idem

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests use real connections to httptest servers on 127.0.0.1.

// countingServer starts a server that counts new connections and requests.
type countingServer struct {
	*httptest.Server
	conns atomic.Int32
	hits  atomic.Int32
	mu    sync.Mutex
	keys  []string
}

func newCountingServer(t *testing.T, h func(n int32, w http.ResponseWriter, r *http.Request)) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get(headerKeyName))
		s.mu.Unlock()
		h(s.hits.Add(1), w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *countingServer) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// newHTTPTransport returns a fresh http.Transport (its own connection pool).
func newHTTPTransport(t *testing.T) *http.Transport {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// TestDrainReusesConnection pins that discarded responses are drained and
// closed: three attempts travel on one connection.
func TestDrainReusesConnection(t *testing.T) {
	t.Parallel()
	srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, strings.Repeat("unavailable ", 2000)) // 24 KB
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	tr := NewTransport(newHTTPTransport(t), noWait())
	resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, srv.URL, "payload"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Fatalf("body %q", got)
	}
	if srv.hits.Load() != 3 {
		t.Fatalf("%d requests, want 3", srv.hits.Load())
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("%d connections opened, want 1 (discarded bodies must be drained)", n)
	}
	keys := srv.Keys()
	if keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Errorf("keys %q: want one key on every attempt", keys)
	}
}

// TestHijackedConnection: the server reads the request and closes the
// connection without answering, once.
func TestHijackedConnection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		method   string
		opts     []Option
		wantHits int32
	}{
		{"GET retried", http.MethodGet, nil, 2},
		{"keyed POST retried", http.MethodPost, nil, 2},
		{"unkeyed POST not retried", http.MethodPost, []Option{WithAutoKeys(false)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						_ = conn.Close()
					}
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			tr := NewTransport(newHTTPTransport(t), append([]Option{noWait()}, tt.opts...)...)
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), tt.method, srv.URL, "body"))
			if got := srv.hits.Load(); got != tt.wantHits {
				t.Errorf("%d requests reached the server, want %d", got, tt.wantHits)
			}
			if tt.wantHits == 1 {
				if e := asError(t, err); e.Attempts != 1 || !errors.Is(err, io.EOF) {
					t.Errorf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "ok" {
				t.Errorf("body %q", got)
			}
		})
	}
}

// TestSlowHandlerAttemptTimeout: the first attempt hangs until the client gives
// up on it; the retry succeeds.
func TestSlowHandlerAttemptTimeout(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select {
			case <-r.Context().Done(): // the client cancelled the attempt
			case <-done:
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	defer close(done)
	var events []AttemptInfo
	// On a loaded machine a quick answer can still miss a short timeout: allow
	// for more attempts; the first must have been cut.
	tr := NewTransport(newHTTPTransport(t), noWait(), WithAttemptTimeout(300*time.Millisecond), WithMaxAttempts(10),
		WithOnRetry(func(_ context.Context, e AttemptInfo) { events = append(events, e) }))
	resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPut, srv.URL, "body"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Errorf("body %q", got)
	}
	if len(events) == 0 || events[0].Reason != "attempt-timeout" || events[0].Number != 2 {
		t.Errorf("events %+v", events)
	}
}

// TestAttemptTimeoutDoesNotCutBody: headers arrive at once, the rest of a large
// body only after the attempt timeout would have fired; it is read in full.
func TestAttemptTimeoutDoesNotCutBody(t *testing.T) {
	t.Parallel()
	const chunk = 64 << 10
	srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(make([]byte, chunk))
		_ = http.NewResponseController(w).Flush()
		select {
		case <-time.After(600 * time.Millisecond): // a slow body, three attempt timeouts long
		case <-r.Context().Done():
			return
		}
		for range 16 {
			_, _ = w.Write(make([]byte, chunk))
		}
	})
	// (On a loaded machine the headers may miss the timeout and the GET be
	// retried; the body of the response returned must be whole either way.)
	tr := NewTransport(newHTTPTransport(t), WithAttemptTimeout(200*time.Millisecond), noWait(), WithMaxAttempts(10))
	resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, srv.URL, ""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || len(b) != 17*chunk {
		t.Fatalf("read %d bytes, %v; want %d", len(b), err, 17*chunk)
	}
}

func TestRedirects(t *testing.T) {
	t.Parallel()
	srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/from":
			http.Redirect(w, r, "/to", http.StatusSeeOther)
		case "/to":
			_, _ = io.WriteString(w, "arrived")
		}
	})
	client := &http.Client{Transport: NewTransport(newHTTPTransport(t), noWait())}

	// A redirect is followed by the client, one operation per hop, none retried.
	resp, err := client.Post(srv.URL+"/from", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "arrived" || srv.hits.Load() != 2 {
		t.Fatalf("body %q after %d requests", got, srv.hits.Load())
	}
	if k := srv.Keys(); k[0] == "" || k[1] != "" {
		t.Errorf("keys %q: the POST is keyed, the GET it is redirected to is not", k)
	}

	// Too many redirects: the client's error, never retried.
	before := srv.hits.Load()
	_, err = client.Get(srv.URL + "/loop")
	if err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Fatalf("err = %v", err)
	}
	if got := srv.hits.Load() - before; got != 10 {
		t.Errorf("%d requests for a redirect loop, want 10", got)
	}
}

func TestTLSCertificateErrorNotRetried(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	tr := NewTransport(newHTTPTransport(t), noWait()) // does not trust the test certificate
	_, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, srv.URL, ""))
	e := asError(t, err)
	if e.Attempts != 1 || e.Cause != nil {
		t.Errorf("err = %v", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestMalformedRequestsGetNetHTTPErrors: a request idem cannot send (another
// scheme, no host, a nil URL or Header) goes to the next RoundTripper as it
// is, once, so the caller gets net/http's own error, never a panic (even with
// a budget, which reads the host) and never a retry of what fails every time.
func TestMalformedRequestsGetNetHTTPErrors(t *testing.T) {
	t.Parallel()
	base := newHTTPTransport(t)
	tr := NewTransport(base, noWait(), WithRetryBudget(newBudget()))
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"ftp scheme", func() *http.Request {
			return mustRequest(t, context.Background(), http.MethodGet, "ftp://127.0.0.1/file", "")
		}},
		{"no host", func() *http.Request {
			r := mustRequest(t, context.Background(), http.MethodGet, "http://127.0.0.1/", "")
			r.URL.Host = ""
			return r
		}},
		{"nil URL", func() *http.Request {
			r := mustRequest(t, context.Background(), http.MethodPost, "http://127.0.0.1/", "x")
			r.URL = nil
			return r
		}},
		{"invalid method, keyed", func() *http.Request {
			r := mustRequest(t, ContextWithKey(context.Background(), "k1"), http.MethodGet, "http://127.0.0.1/", "")
			r.Method = "BAD METHOD"
			return r
		}},
		{"invalid header name", func() *http.Request {
			r := mustRequest(t, context.Background(), http.MethodGet, "http://127.0.0.1/", "")
			r.Header["Bad Name"] = []string{"x"}
			return r
		}},
		{"invalid header value", func() *http.Request {
			r := mustRequest(t, context.Background(), http.MethodPut, "http://127.0.0.1/", "x")
			r.Header["X-Bad"] = []string{"a\nb"}
			return r
		}},
		{"nil Header", func() *http.Request {
			r := mustRequest(t, context.Background(), http.MethodGet, "http://127.0.0.1/", "")
			r.Header = nil
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, want := base.RoundTrip(tc.req())
			require.Error(t, want)
			_, err := tr.RoundTrip(tc.req())
			require.Error(t, err)
			assert.Equal(t, want.Error(), err.Error(), "idem's error is net/http's")
		})
	}
}

// TestRetryUnsentDialError: nothing listens on the port, so every dial fails;
// an unkeyed POST is retried only with WithRetryUnsent.
func TestRetryUnsentDialError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/"
	_ = ln.Close()
	for _, tt := range []struct {
		name string
		opts []Option
		want int
	}{
		{"default", []Option{WithAutoKeys(false)}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			attempts := 1
			opts := append([]Option{noWait(), WithMaxAttempts(3), WithOnRetry(func(context.Context, AttemptInfo) { attempts++ })}, tt.opts...)
			tr := NewTransport(newHTTPTransport(t), opts...)
			_, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, url, "body"))
			e := asError(t, err)
			if e.Attempts != tt.want || attempts != tt.want || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("err = %v (%d attempts), want %d", err, e.Attempts, tt.want)
			}
		})
	}
}

// TestNewClientEndToEnd runs a keyed POST through NewClient and reads the key
// back from resp.Request.
func TestNewClientEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		_, _ = io.WriteString(w, r.Header.Get(headerKeyName))
	})
	client := NewClient(noWait(), WithQuotedKeys(true))
	client.Transport.(*Transport).next = newHTTPTransport(t)
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	sent := readAll(t, resp)
	key := keyOf(resp)
	if sent != `"`+key+`"` || !Replayed(resp) {
		t.Errorf("server saw %s, AttemptInfo.Key %s, replayed %v", sent, key, Replayed(resp))
	}
}

// TestProtocolSwitchThroughBoundedAttempt: a 101 Switching Protocols answer to
// an attempt that idem bounds itself (no caller deadline) keeps its
// connection: the upgraded stream works after RoundTrip returns.
func TestProtocolSwitchThroughBoundedAttempt(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw) // echo until the client closes
	}))
	defer srv.Close()
	req := mustRequest(t, context.Background(), http.MethodGet, srv.URL, "")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := NewTransport(newHTTPTransport(t), WithAttemptTimeout(time.Second)).RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the body of a 101 is the connection (%T)", resp.Body)
	defer rwc.Close()
	_, err = rwc.Write([]byte("hello"))
	require.NoError(t, err)
	got := make([]byte, 5)
	_, err = io.ReadFull(rwc, got)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
}
