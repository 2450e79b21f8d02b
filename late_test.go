package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateServer answers the first request of an operation only when release is
// closed (with first's status and the body "first"), and every later one with
// later(n, w, r), n counting from 2. arrived receives each request's number
// as it comes; gone receives the number of a request whose client left. A
// request still held when the test ends is let go then, so that a client that
// never leaves fails the test instead of hanging httptest's Close.
type lateServer struct {
	*httptest.Server
	n       atomic.Int32
	release chan struct{}
	arrived chan int32
	gone    chan int32
	ended   chan struct{} // closed when the test ends
}

func newLateServer(t *testing.T, first int, later func(n int32, w http.ResponseWriter, r *http.Request)) *lateServer {
	s := &lateServer{release: make(chan struct{}), arrived: make(chan int32, 100), gone: make(chan int32, 100), ended: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := s.n.Add(1)
		s.arrived <- n
		if n > 1 {
			later(n, w, r)
			return
		}
		select {
		case <-s.release:
			w.WriteHeader(first)
			_, _ = io.WriteString(w, "first")
		case <-r.Context().Done():
			s.gone <- n
		case <-s.ended:
		}
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.ended) }) // runs before s.Close
	return s
}

// inProgress answers 409 with a Retry-After of 10 s, within the test's guard
// (20 s) but far past the time a late answer takes in these tests: an
// operation that waits for it instead of taking the late answer is slow to
// fail, and makes a poll that the test counts.
func inProgress(_ int32, w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "10")
	w.WriteHeader(http.StatusConflict)
}

// hold answers nothing until the client leaves, and reports it.
func (s *lateServer) hold(n int32, _ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
		s.gone <- n
	case <-s.ended:
	}
}

// guard bounds an operation that should end long before: a test that fails
// ends on it instead of on the test binary's time-out.
func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLateAnswerEndsTheWait: the first attempt passes its time-out and goes
// on; the retry gets 409 with a minute's Retry-After. When the first attempt's
// answer comes, the operation ends with it at once: its own 201, its body
// readable, and no poll made.
func TestLateAnswerEndsTheWait(t *testing.T) {
	t.Parallel()
	srv := newLateServer(t, http.StatusCreated, inProgress)
	tr := NewTransport(srv.Client().Transport, WithAttemptTimeout(50*time.Millisecond),
		WithBackoff(time.Millisecond, time.Millisecond), WithMaxElapsed(2*time.Minute), WithMaxRetryAfter(2*time.Minute))

	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(mustRequest(t, guard(t), http.MethodPost, srv.URL, `{"amount":1}`))
		done <- result{resp, err}
	}()
	require.EqualValues(t, 1, waitFor(t, srv.arrived, "the first attempt never reached the server"))
	require.EqualValues(t, 2, waitFor(t, srv.arrived, "the retry never reached the server")) // answered 409
	close(srv.release)

	r := waitFor(t, done, "the late answer did not end the operation")
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusCreated, r.resp.StatusCode)
	assert.Equal(t, "first", readAll(t, r.resp))
	assert.EqualValues(t, 2, srv.n.Load(), "no poll after the 409")
}

// TestLateAnswerEndsTheAttemptInFlight: the late answer comes while the
// operation's current attempt is waiting for its own; that attempt is let go
// (its server sees the client leave) and the late answer is returned.
func TestLateAnswerEndsTheAttemptInFlight(t *testing.T) {
	t.Parallel()
	var srv *lateServer
	srv = newLateServer(t, http.StatusCreated, func(n int32, w http.ResponseWriter, r *http.Request) { srv.hold(n, w, r) })
	// The second attempt's own time-out is far away: only the late answer ends it.
	tr := NewTransport(srv.Client().Transport, WithAttemptTimeout(50*time.Millisecond),
		WithBackoff(time.Millisecond, time.Millisecond), WithMaxElapsed(2*time.Minute))
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := tr.RoundTrip(mustRequest(t, guard(t), http.MethodPost, srv.URL, `{"amount":1}`))
		assert.NoError(t, err)
		done <- resp
	}()
	require.EqualValues(t, 1, waitFor(t, srv.arrived, "the first attempt never reached the server"))
	// Attempts time out every 50 ms; release the first once a retry is waiting.
	require.EqualValues(t, 2, waitFor(t, srv.arrived, "the retry never reached the server"))
	close(srv.release)

	resp := waitFor(t, done, "the late answer did not end the operation")
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "first", readAll(t, resp))
	// Every other attempt is let go: their server sees each client leave.
	for left := srv.n.Load() - 1; left > 0; left-- {
		assert.NotEqualValues(t, 1, waitFor(t, srv.gone, "an attempt the late answer replaced was not let go"), "the answering attempt was cancelled")
	}
}

// closeSignal is a response body that reports its Close.
type closeSignal struct {
	io.Reader
	closed chan struct{}
}

func (c *closeSignal) Close() error { close(c.closed); return nil }

// TestLateAttemptsTakeOnlyFinalAnswers drives the rule itself: a late answer
// that may be retried (409, 429, 500, 503) or a late error is let go (body
// closed, attempt's context released) and ends nothing; the first final
// answer is taken, and keeps its context until its body is closed; one that
// comes after it is let go; when the operation ends, every other late attempt
// is cancelled.
func TestLateAttemptsTakeOnlyFinalAnswers(t *testing.T) {
	t.Parallel()
	l := newLateAttempts(func(resp *http.Response) bool {
		return resp.StatusCode < 500 && resp.StatusCode != 409 && resp.StatusCode != 429
	})
	late := func() (chan roundTrip, context.Context, *closeSignal) {
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan roundTrip, 1)
		l.goOn(done, &boundedAttempt{cancel: cancel, after: time.Second})
		return done, ctx, &closeSignal{Reader: strings.NewReader("body"), closed: make(chan struct{})}
	}
	for _, status := range []int{http.StatusConflict, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		done, ctx, body := late()
		done <- roundTrip{resp: &http.Response{StatusCode: status, Body: body}}
		waitFor(t, body.closed, "a late %d was not let go (its body was kept open: taken as the final answer?)", status)
		waitFor(t, ctx.Done(), "a late %d's attempt context was not released", status)
		assert.NotErrorIs(t, context.Cause(ctx), errOperationEnded, "status %d: released at once", status)
	}
	done, ctx, _ := late()
	done <- roundTrip{err: io.ErrUnexpectedEOF}
	waitFor(t, ctx.Done(), "a late error's attempt context was not released")
	select {
	case <-l.won:
		t.Fatal("a retryable late answer was taken")
	default:
	}

	pending, pendingCtx, _ := late() // still running when the operation ends
	done, ctx, body := late()
	resp := &http.Response{StatusCode: http.StatusCreated, Body: body}
	done <- roundTrip{resp: resp}
	waitFor(t, l.won, "a late 201 was not taken as the final answer")
	assert.Same(t, resp, l.taken())
	done2, ctx2, body2 := late()
	done2 <- roundTrip{resp: &http.Response{StatusCode: http.StatusOK, Body: body2}}
	waitFor(t, body2.closed, "a second final answer was not let go")
	waitFor(t, ctx2.Done(), "a second final answer's context was not released")

	assert.Same(t, resp, l.close())
	waitFor(t, pendingCtx.Done(), "a late attempt still running was not cancelled when the operation ended")
	assert.ErrorIs(t, context.Cause(pendingCtx), errOperationEnded)
	assert.NoError(t, ctx.Err(), "the answer's context lives until its body is closed")
	require.NoError(t, resp.Body.Close())
	waitFor(t, body.closed, "closing the answer's body did not close the attempt's")
	waitFor(t, ctx.Done(), "closing the answer's body did not release its context")
	pending <- roundTrip{err: context.Canceled}
}

// TestUnkeyedAttemptCutAtItsTimeout: without a key an attempt is cut at its
// time-out, before the retry is sent: its server sees the client leave.
func TestUnkeyedAttemptCutAtItsTimeout(t *testing.T) {
	t.Parallel()
	srv := newLateServer(t, http.StatusOK, func(_ int32, w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "retry")
	})
	tr := NewTransport(srv.Client().Transport, WithAttemptTimeout(50*time.Millisecond),
		WithBackoff(time.Millisecond, time.Millisecond))
	resp, err := tr.RoundTrip(mustRequest(t, guard(t), http.MethodGet, srv.URL, ""))
	require.NoError(t, err)
	assert.Equal(t, "retry", readAll(t, resp))
	assert.EqualValues(t, 1, waitFor(t, srv.gone, "the timed-out GET was not cancelled"), "the timed-out GET was cancelled")
}

// TestLateAnswerAfterCallerCancel: a caller that cancels gets its context's
// error, and the late attempt is let go.
func TestLateAnswerAfterCallerCancel(t *testing.T) {
	t.Parallel()
	srv := newLateServer(t, http.StatusCreated, inProgress)
	tr := NewTransport(srv.Client().Transport, WithAttemptTimeout(50*time.Millisecond),
		WithBackoff(time.Millisecond, time.Millisecond), WithMaxElapsed(2*time.Minute), WithMaxRetryAfter(2*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodPost, srv.URL, `{"amount":1}`))
		done <- err
	}()
	require.EqualValues(t, 1, waitFor(t, srv.arrived, "the first attempt never reached the server"))
	require.EqualValues(t, 2, waitFor(t, srv.arrived, "the retry never reached the server"))
	cancel()
	assert.ErrorIs(t, waitFor(t, done, "the cancelled operation did not return"), context.Canceled)
	assert.EqualValues(t, 1, waitFor(t, srv.gone, "the late attempt was not let go when the caller cancelled"), "the late attempt was let go")
}

// attemptContexts is a RoundTripper that keeps the context of every attempt
// it passes on.
type attemptContexts struct {
	next http.RoundTripper
	mu   sync.Mutex
	ctxs []context.Context
}

func (a *attemptContexts) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.ctxs = append(a.ctxs, req.Context())
	a.mu.Unlock()
	return a.next.RoundTrip(req)
}

func (a *attemptContexts) all() []context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]context.Context(nil), a.ctxs...)
}

// TestLateAttemptsCancelledWhenRoundTripReturns: keyed attempts still
// running past WithAttemptTimeout are cancelled by the time RoundTrip
// returns, whether it returns a later attempt's answer or gives up at the
// cap: each such attempt's context is done, with errOperationEnded, the moment
// RoundTrip has returned, and its server sees the client leave within
// waitLimit. The held requests also end when the test does, so a broken rule
// fails here with a message instead of hanging httptest's Close.
func TestLateAttemptsCancelledWhenRoundTripReturns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		answerAt int32 // the first request the server answers (201); the ones before it are held
		opts     []Option
		wantErr  bool
	}{
		{"a later attempt answers", 2, nil, false},
		{"the cap ends the operation", 0, []Option{WithMaxAttempts(3), WithMaxElapsed(400 * time.Millisecond)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			gone := make(chan int32, 10)
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				i := n.Add(1)
				if tc.answerAt > 0 && i >= tc.answerAt {
					w.WriteHeader(http.StatusCreated)
					return
				}
				select {
				case <-r.Context().Done():
					gone <- i
				case <-release: // the test has ended
				}
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) }) // runs before srv.Close
			rec := &attemptContexts{next: srv.Client().Transport}
			tr := NewTransport(rec, append([]Option{WithAttemptTimeout(50 * time.Millisecond),
				WithBackoff(time.Millisecond, time.Millisecond)}, tc.opts...)...)

			resp, err := tr.RoundTrip(mustRequest(t, guard(t), http.MethodPost, srv.URL, `{"amount":1}`))
			ctxs := rec.all() // read before anything else can end them
			if tc.wantErr != (err != nil) {
				t.Fatalf("RoundTrip = %v, %v; want an error %v", resp, err, tc.wantErr)
			}
			if resp != nil {
				_ = resp.Body.Close()
			}
			held := len(ctxs)
			if tc.answerAt > 0 {
				held = int(tc.answerAt) - 1
			}
			if held < 1 || len(ctxs) < held {
				t.Fatalf("%d attempts, %d of them held; want at least one held past its time-out", len(ctxs), held)
			}
			for i, ctx := range ctxs[:held] {
				if cause := context.Cause(ctx); !errors.Is(cause, errOperationEnded) {
					t.Errorf("attempt %d, still running past WithAttemptTimeout when RoundTrip returned: its context's cause is %v; want %v",
						i+1, cause, errOperationEnded)
				}
			}
			for range held {
				waitFor(t, gone, "an attempt held past WithAttemptTimeout: its server did not see the client leave after RoundTrip returned")
			}
		})
	}
}

// TestLateAnswerAsRetriesRunOut: the first attempt of a payment passes its
// 1s time-out and goes on; the retry times out too, and with it the attempts
// run out at 2s, with 28s left under the cap. The first attempt's 201 comes at
// 2.5s: the payment went through, and the operation must return it, not
// ErrExhausted.
func TestLateAnswerAsRetriesRunOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{delay: 2500 * time.Millisecond, status: http.StatusCreated, body: "paid"}, {block: true}}}
		tr := NewTransport(f, noWait(), WithAttemptTimeout(time.Second), WithMaxAttempts(2))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/payments", "{}"))
		if err != nil {
			t.Fatalf("RoundTrip: %v after %v; want the first attempt's 201, which came at 2.5s", err, time.Since(start))
		}
		if resp.StatusCode != http.StatusCreated || readAll(t, resp) != "paid" {
			t.Errorf("got %d, want the late 201", resp.StatusCode)
		}
		if got := time.Since(start); got != 2500*time.Millisecond {
			t.Errorf("returned after %v, want 2.5s: the moment the late answer came", got)
		}
	})
}

// TestGivingUpWaitsNoLongerThanTheCap: late attempts that never answer do not
// hold the operation past its cap.
func TestGivingUpWaitsNoLongerThanTheCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}}}
		tr := NewTransport(f, noWait(), WithAttemptTimeout(time.Second), WithMaxAttempts(2), WithMaxElapsed(5*time.Second))
		start := time.Now()
		_, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/payments", "{}"))
		if !errors.Is(err, ErrExhausted) {
			t.Fatalf("err %v, want ErrExhausted", err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("returned after %v, want 5s: the late attempts may answer until the cap, no longer", got)
		}
	})
}

// TestLateAnswerFinalByRetryIf: a late answer is final when the table and the
// WithRetryIf predicate together say "do not retry": a late 503 that the
// predicate refuses to retry ends the operation.
func TestLateAnswerFinalByRetryIf(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{delay: 1500 * time.Millisecond, status: 503, body: "down"}, {block: true}}}
		tr := NewTransport(f, noWait(), WithAttemptTimeout(time.Second),
			WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
				return retryable && (resp == nil || resp.StatusCode != 503)
			}))
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/", "{}"))
		if err != nil {
			t.Fatalf("RoundTrip: %v; want the late 503, final under the predicate", err)
		}
		if resp.StatusCode != 503 || readAll(t, resp) != "down" {
			t.Errorf("got %d, want the late 503", resp.StatusCode)
		}
	})
}
