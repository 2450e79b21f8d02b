package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestPlainConflictReturnedAtOnce: an API that does not implement keys
// answers 409 to a POST (a name already taken). The first attempt under a
// generated key cannot meet that key in progress anywhere, so the 409 is the
// answer: one request, no wait started.
func TestPlainConflictReturnedAtOnce(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"username already taken"}`))
	}))
	defer srv.Close()
	retried := false
	client := NewClient(WithOnRetry(func(context.Context, AttemptInfo) { retried = true }))
	start := time.Now()
	resp, err := client.Post(srv.URL+"/users", "application/json", nil)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || n.Load() != 1 || retried {
		t.Errorf("status %d after %d requests (a retry started: %v); want the 409 after 1 request, no retry", resp.StatusCode, n.Load(), retried)
	}
	t.Logf("returned after %v", elapsed)
}

// TestTimeoutLooksLikeTimeout: an http.Client Timeout, a context deadline and
// the WithMaxElapsed cap that end an operation give an error that says
// Timeout() (os.IsTimeout, *url.Error), as net/http's own do; a cancel and a
// refused retry do not.
func TestTimeoutLooksLikeTimeout(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/503" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		client  *http.Client
		ctx     func() (context.Context, context.CancelFunc)
		path    string
		timeout bool
	}{
		{"http.Client Timeout", &http.Client{Transport: NewTransport(nil), Timeout: 200 * time.Millisecond}, nil, "/", true},
		{"context deadline", NewClient(), func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, "/", true},
		{"WithMaxElapsed cap", NewClient(WithMaxElapsed(200 * time.Millisecond)), nil, "/", true},
		{"cancelled", NewClient(), func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, "/", false},
		{"invalid key", NewClient(WithKeyGenerator(func() string { return "bad key" })), nil, "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+tc.path, nil)
			resp, err := tc.client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("got %d, want an error", resp.StatusCode)
			}
			var ue *url.Error
			if !errors.As(err, &ue) {
				t.Fatalf("err %T, want *url.Error", err)
			}
			if got := os.IsTimeout(err); got != tc.timeout {
				t.Errorf("os.IsTimeout(%v) = %v, want %v", err, got, tc.timeout)
			}
			if got := ue.Timeout(); got != tc.timeout {
				t.Errorf("(*url.Error).Timeout() = %v, want %v", got, tc.timeout)
			}
		})
	}
}

// TestRetryIfOverRealServer: a predicate adds 425 to the retried answers and
// refuses the retry of a 503; an unkeyed POST still goes once whatever it
// says.
func TestRetryIfOverRealServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		first     int
		autoKeys  bool
		method    string
		wantCalls int32
		wantCode  int
	}{
		{"425 added, keyed POST", http.StatusTooEarly, true, http.MethodPost, 2, 201},
		{"425 added, GET", http.StatusTooEarly, true, http.MethodGet, 2, 201},
		{"425 added, unkeyed POST goes once", http.StatusTooEarly, false, http.MethodPost, 1, 425},
		{"503 refused", http.StatusServiceUnavailable, true, http.MethodGet, 1, 503},
		{"502 as the table says", http.StatusBadGateway, true, http.MethodGet, 2, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.WriteHeader(tc.first)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			defer srv.Close()
			client := NewClient(noWait(), WithAutoKeys(tc.autoKeys),
				WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
					if resp != nil && resp.StatusCode == http.StatusTooEarly {
						return true
					}
					if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
						return false
					}
					return retryable
				}))
			req, _ := http.NewRequest(tc.method, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.wantCode || n.Load() != tc.wantCalls {
				t.Errorf("status %d after %d requests, want %d after %d", resp.StatusCode, n.Load(), tc.wantCode, tc.wantCalls)
			}
		})
	}
}
