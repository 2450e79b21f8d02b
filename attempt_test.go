package idem

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestFirstAttemptCapOverHTTP runs the Transport's own bound of a first
// attempt through net/http, whose per-request context derives from the
// attempt's: a handler that never answers is cut at the WithMaxElapsed cap,
// and the server sees the connection go, whether or not the caller's context
// can be cancelled; the error says the cap ended it (ErrExhausted, not the
// context's DeadlineExceeded); a caller's cancellation still ends the attempt
// at once.
func TestFirstAttemptCapOverHTTP(t *testing.T) {
	t.Parallel()
	const limit = 300 * time.Millisecond
	tests := []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		cancel bool // the caller cancels once the server has the request
		want   error
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, false, ErrExhausted},
		{"cancellable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, false, ErrExhausted},
		{"caller cancels", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, true, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started, gone, release := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
			srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-release:
				}
			})
			defer close(release)
			ctx, cancel := tc.ctx()
			defer cancel()
			maxElapsed := limit
			if tc.cancel {
				maxElapsed = time.Hour
				go func() { <-started; cancel() }()
			}
			tr := NewTransport(newHTTPTransport(t), WithMaxElapsed(maxElapsed))
			start := time.Now()
			resp, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodPost, srv.URL, "{}"))
			if resp != nil {
				t.Fatalf("got a response: %d", resp.StatusCode)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
			if !tc.cancel && errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err %v matches context.DeadlineExceeded; the caller's context is fine, the cap ended it", err)
			}
			if el := time.Since(start); !tc.cancel && el < limit {
				t.Errorf("returned after %v, before the %v cap", el, limit)
			}
			waitFor(t, gone, "the server never saw the attempt cancelled")
		})
	}
}
