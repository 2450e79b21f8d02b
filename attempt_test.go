package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

type ctxValueKey struct{}

// boundAttempt returns an attempt bound on top of parent, as send uses it.
func boundAttempt(t *testing.T, parent context.Context) (*attempt, context.Context) {
	t.Helper()
	a := new(attempt)
	ctx := a.bind(parent)
	return a, ctx
}

// isDone reports whether ch is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestAttemptContext pins that an attempt that is its own context behaves as
// a context.WithCancel of a parent that is never cancelled, for the context
// package's derived contexts and AfterFunc as well as for direct use.
func TestAttemptContext(t *testing.T) {
	t.Parallel()
	parent := context.WithValue(context.Background(), ctxValueKey{}, "v")
	tests := []struct {
		name  string
		check func(t *testing.T, a *attempt, ctx context.Context)
	}{
		{"is its own context", func(t *testing.T, a *attempt, ctx context.Context) {
			if ctx != context.Context(a) {
				t.Errorf("bind returned %T, want the attempt", ctx)
			}
		}},
		{"release closes Done and sets Err", func(t *testing.T, a *attempt, ctx context.Context) {
			done := ctx.Done()
			if isDone(done) || ctx.Err() != nil || ctx.Done() != done {
				t.Fatal("done before release, or Done not stable")
			}
			a.release()
			a.release() // twice is fine
			if !isDone(done) || !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
				t.Errorf("after release: done %v, err %v, cause %v", isDone(done), ctx.Err(), context.Cause(ctx))
			}
		}},
		{"Done first asked after release", func(t *testing.T, a *attempt, ctx context.Context) {
			a.release()
			if !isDone(ctx.Done()) {
				t.Error("Done not closed")
			}
		}},
		{"values and deadline are the parent's", func(t *testing.T, a *attempt, ctx context.Context) {
			if ctx.Value(ctxValueKey{}) != "v" {
				t.Error("value lost")
			}
			if _, ok := ctx.Deadline(); ok {
				t.Error("a deadline appeared")
			}
		}},
		{"derived contexts are cancelled with it", func(t *testing.T, a *attempt, ctx context.Context) {
			c1, cancel1 := context.WithCancelCause(ctx)
			defer cancel1(nil)
			c2, cancel2 := context.WithTimeout(ctx, time.Hour)
			defer cancel2()
			own, cancelOwn := context.WithCancel(ctx)
			cancelOwn() // cancelled on its own first
			a.release()
			for i, c := range []context.Context{c1, c2, own} {
				if !isDone(c.Done()) || !errors.Is(c.Err(), context.Canceled) {
					t.Errorf("derived context %d: err %v", i, c.Err())
				}
			}
		}},
		{"derived after release is cancelled at once", func(t *testing.T, a *attempt, ctx context.Context) {
			a.release()
			c, cancel := context.WithCancel(ctx)
			defer cancel()
			if !isDone(c.Done()) {
				t.Error("derived context of a released attempt not done")
			}
		}},
		{"context.AfterFunc", func(t *testing.T, a *attempt, ctx context.Context) {
			ran := make(chan string, 3)
			context.AfterFunc(ctx, func() { ran <- "kept" })
			stop := context.AfterFunc(ctx, func() { ran <- "stopped" })
			if !stop() {
				t.Error("stop before release returned false")
			}
			a.release()
			context.AfterFunc(ctx, func() { ran <- "late" })
			got := map[string]bool{<-ran: true, <-ran: true}
			if !got["kept"] || !got["late"] {
				t.Errorf("ran %v, want kept and late", got)
			}
			select {
			case s := <-ran:
				t.Errorf("%s ran too", s)
			default:
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, ctx := boundAttempt(t, parent)
			tc.check(t, a, ctx)
		})
	}
}

// TestAttemptCancellableParent: on top of a context that can be cancelled,
// the attempt's context is a standard one: the parent's cancellation and
// cause reach it, and release cancels it alone.
func TestAttemptCancellableParent(t *testing.T) {
	t.Parallel()
	cause := errors.New("caller gave up")
	t.Run("parent cancelled", func(t *testing.T) {
		t.Parallel()
		parent, cancel := context.WithCancelCause(context.Background())
		_, ctx := boundAttempt(t, parent)
		cancel(cause)
		if !isDone(ctx.Done()) || !errors.Is(context.Cause(ctx), cause) {
			t.Errorf("err %v, cause %v", ctx.Err(), context.Cause(ctx))
		}
	})
	t.Run("released", func(t *testing.T) {
		t.Parallel()
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, ctx := boundAttempt(t, parent)
		a.release()
		if !errors.Is(ctx.Err(), context.Canceled) || parent.Err() != nil {
			t.Errorf("attempt err %v, parent err %v", ctx.Err(), parent.Err())
		}
	})
}

// TestAttemptBodyReleases: closing a bound attempt's response body releases
// its context, once the body is closed and not before.
func TestAttemptBodyReleases(t *testing.T) {
	t.Parallel()
	a, ctx := boundAttempt(t, context.Background())
	a.body = io.NopCloser(strings.NewReader("data"))
	var body io.ReadCloser = (*attemptBody)(a)
	b, err := io.ReadAll(body)
	if err != nil || string(b) != "data" || ctx.Err() != nil {
		t.Fatalf("read %q, %v; context err %v", b, err, ctx.Err())
	}
	if err := body.Close(); err != nil || ctx.Err() == nil {
		t.Errorf("close: %v; context err %v", err, ctx.Err())
	}
}

// TestFirstAttemptCapOverHTTP runs the Transport's own bound of a first
// attempt through net/http, whose per-request context derives from the
// attempt's: a handler that never answers is cut at the WithMaxElapsed cap,
// and the server sees the connection go, whether or not the caller's context
// can be cancelled; a caller's cancellation still ends the attempt at once.
func TestFirstAttemptCapOverHTTP(t *testing.T) {
	t.Parallel()
	const limit = 300 * time.Millisecond
	tests := []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		cancel bool // the caller cancels once the server has the request
		want   error
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, false, context.DeadlineExceeded},
		{"cancellable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, false, context.DeadlineExceeded},
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
			if el := time.Since(start); !tc.cancel && el < limit {
				t.Errorf("returned after %v, before the %v cap", el, limit)
			}
			<-gone // the server saw the attempt cancelled
		})
	}
}
