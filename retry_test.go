package idem

import (
	"fmt"
	"strconv"

	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run in a synctest bubble: time.Now, timers and sleeps use a fake
// clock that advances only when every goroutine of the test is blocked, so
// every wait is exact and instant.

// attemptOffsets returns when each attempt started, relative to start.
func attemptOffsets(start time.Time, calls []fakeCall) []time.Duration {
	d := make([]time.Duration, len(calls))
	for i, c := range calls {
		d[i] = c.at.Sub(start)
	}
	return d
}

// wantOffsets turns waits into cumulative attempt times.
func wantOffsets(waits ...time.Duration) []time.Duration {
	out := []time.Duration{0}
	var sum time.Duration
	for _, w := range waits {
		sum += w
		out = append(out, sum)
	}
	return out
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBackoffTiming checks the waits between attempts against the AWS blog's
// formulas worked out by hand for base 100ms, cap 1s and a random number of
// 0.7 (never against the code under test):
//
//	full:         0.7 × min(1s, 100ms·2^n)           = 70, 140, 280, 560 ms
//	equal:        v/2 + 0.7 × v/2, v = min(1s, ...)  = 85, 170, 340, 680 ms
//	decorrelated: min(1s, 100ms + 0.7 × (3·prev - 100ms)), prev from 100ms
//	              = 240, 534, 1000 (1151.4 capped), 1000 ms
//	none:         min(1s, 100ms·2^n)                 = 100, 200, 400, 800 ms
func TestBackoffTiming(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	waits := map[Jitter][]time.Duration{
		FullJitter:         {70 * ms, 140 * ms, 280 * ms, 560 * ms},
		EqualJitter:        {85 * ms, 170 * ms, 340 * ms, 680 * ms},
		DecorrelatedJitter: {240 * ms, 534 * ms, 1000 * ms, 1000 * ms},
		NoJitter:           {100 * ms, 200 * ms, 400 * ms, 800 * ms},
	}
	for _, j := range []Jitter{FullJitter, EqualJitter, DecorrelatedJitter, NoJitter} {
		t.Run(fmt.Sprint("jitter-", int(j)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const base, max = 100 * time.Millisecond, time.Second
				rnd := func() float64 { return 0.7 }
				f := &fakeRT{steps: statusSteps(503, 500, 502, 504, 200)}
				tr := NewTransport(f, WithJitter(j), WithBackoff(base, max))
				tr.rand = rnd
				start := time.Now()
				resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%v, %v", resp, err)
				}
				want := wantOffsets(waits[j]...)
				if got := attemptOffsets(start, f.Calls()); !equalDurations(got, want) {
					t.Errorf("attempts at %v, want %v", got, want)
				}
			})
		})
	}
}

// TestBackoffPerOperation pins that an operation does not inherit the backoff
// progression of the one before it.
func TestBackoffPerOperation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: statusSteps(503, 503, 200, 503, 200)}
		tr := NewTransport(f, WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second))
		for range 2 {
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
		}
		calls := f.Calls()
		if d := calls[4].at.Sub(calls[3].at); d != 100*time.Millisecond {
			t.Errorf("second operation's first wait %v, want 100ms", d)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	ra := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	tests := []struct {
		name      string
		first     fakeStep
		opts      []Option
		wantCalls int
		wantWait  time.Duration // between the attempts
		wantCode  int
	}{
		// rand is 0.5: the spread is 0.5 × min(1s, RA/10).
		{"503 delta-seconds", fakeStep{status: 503, header: ra("2")}, nil, 2, 2*time.Second + 100*time.Millisecond, 200},
		{"429 delta-seconds", fakeStep{status: 429, header: ra("20")}, nil, 2, 20*time.Second + 500*time.Millisecond, 200},
		{"409 keyed", fakeStep{status: 409, header: ra("1")}, []Option{}, 2, time.Second + 50*time.Millisecond, 200},
		{"503 HTTP-date", fakeStep{status: 503, header: ra(time.Date(2000, 1, 1, 0, 0, 3, 0, time.UTC).Format(http.TimeFormat))}, nil, 2,
			3*time.Second + 150*time.Millisecond, 200},
		{"backoff larger than Retry-After", fakeStep{status: 503, header: ra("1")}, []Option{WithBackoff(5*time.Second, 5*time.Second)}, 2,
			5 * time.Second, 200},
		{"Retry-After 0 uses backoff", fakeStep{status: 503, header: ra("0")}, nil, 2, 100 * time.Millisecond, 200},
		{"malformed Retry-After uses backoff", fakeStep{status: 503, header: ra("soon")}, nil, 2, 100 * time.Millisecond, 200},
		{"ignored on 500", fakeStep{status: 500, header: ra("7")}, nil, 2, 100 * time.Millisecond, 200},
		{"beyond MaxRetryAfter: returned at once", fakeStep{status: 503, header: ra("31")}, nil, 1, 0, 503},
		{"custom MaxRetryAfter", fakeStep{status: 429, header: ra("3")}, []Option{WithMaxRetryAfter(2 * time.Second)}, 1, 0, 429},
		{"beyond MaxElapsed: returned at once", fakeStep{status: 503, header: ra("29")}, []Option{WithMaxElapsed(10 * time.Second)}, 1, 0, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if !time.Now().Equal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
					// The HTTP-date case assumes the bubble's start date: fail
					// loudly rather than skip it in silence.
					t.Fatalf("synctest's start date is %v, not 2000-01-01: update the HTTP-date case", time.Now())
				}
				f := &fakeRT{steps: []fakeStep{tt.first, {status: 200}}}
				opts := append([]Option{WithJitter(NoJitter), WithBackoff(100*time.Millisecond, 10*time.Second)}, tt.opts...)
				tr := NewTransport(f, opts...)
				tr.rand = func() float64 { return 0.5 }
				// A caller's key: a 409 on the first attempt under a generated key is final.
				resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "k"), http.MethodPost, "http://x/", "b"))
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tt.wantCode {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.wantCode)
				}
				_ = resp.Body.Close()
				calls := f.Calls()
				if len(calls) != tt.wantCalls {
					t.Fatalf("%d attempts, want %d", len(calls), tt.wantCalls)
				}
				if len(calls) == 2 {
					if d := calls[1].at.Sub(calls[0].at); d != tt.wantWait {
						t.Errorf("waited %v, want %v", d, tt.wantWait)
					}
				}
			})
		})
	}
}

func TestRetryAfterSpreadBounds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, r := range []float64{0, 0.25, 0.999999999, 1} {
			for _, d := range []time.Duration{0, time.Millisecond, time.Second, 10 * time.Second, time.Hour} {
				s := spread(d, r)
				limit := min(time.Second, d/10)
				if s < 0 || (limit > 0 && s >= limit) || (limit == 0 && s != 0) {
					t.Errorf("spread(%v) with r=%v = %v, want in [0, %v)", d, r, s, limit)
				}
			}
		}
	})
}

func TestMaxElapsedStopsBeforeWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// NoJitter waits 400ms, 800ms: the second would end at 1.2s > 1s.
		f := &fakeRT{steps: statusSteps(503, 503, 200)}
		tr := NewTransport(f, WithJitter(NoJitter), WithBackoff(400*time.Millisecond, 10*time.Second), WithMaxElapsed(time.Second))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 || len(f.Calls()) != 2 {
			t.Errorf("status %d after %d attempts, want 503 after 2", resp.StatusCode, len(f.Calls()))
		}
		if got := time.Since(start); got != 400*time.Millisecond {
			t.Errorf("returned after %v, want 400ms (no wait past the cap)", got)
		}
		_ = readAll(t, resp)
	})
}

func TestContextDeadlineStopsBeforeWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{err: errConnReset()}, {err: errConnReset()}, {status: 200}}}
		tr := NewTransport(f, WithJitter(NoJitter), WithBackoff(time.Second, 10*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodGet, "http://x/", ""))
		e := asError(t, err)
		if e.Attempts != 2 || !errors.Is(err, ErrExhausted) || !errors.Is(err, errConnReset()) {
			t.Errorf("err = %v", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("returned after %v, want 1s (the 2s wait would pass the deadline)", got)
		}
	})
}

// errConnReset returns a connection reset, which classifyError knows to be transient.
func errConnReset() error { return connResetErr }

var connResetErr error = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

func TestCancelDuringWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: statusSteps(503, 200)}
		budget := newBudget()
		tr := NewTransport(f, WithJitter(NoJitter), WithBackoff(time.Second, time.Second), WithRetryBudget(budget))
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(300 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodGet, "http://x/", ""))
		if resp != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, %v; want context.Canceled", resp, err)
		}
		if got := time.Since(start); got != 300*time.Millisecond {
			t.Errorf("returned after %v, want 300ms (at once)", got)
		}
		e := asError(t, err)
		if e.Attempts != 1 || e.LastStatus != 503 {
			t.Errorf("Error = %+v", e)
		}
		if s := budget.Stats(); s.RetriesAllowed != 1 || s.Refunds != 1 {
			t.Errorf("budget stats %+v: want the unsent retry refunded", s)
		}
		if b := f.Bodies()[0]; !b.closed.Load() {
			t.Error("discarded response not closed")
		}
	})
}

func TestCancelCause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: statusSteps(503, 200)}
		tr := NewTransport(f, WithBackoff(time.Second, time.Second), WithJitter(NoJitter))
		ctx, cancel := context.WithCancelCause(context.Background())
		shutdown := errors.New("shutting down")
		go func() {
			time.Sleep(time.Millisecond)
			cancel(shutdown)
		}()
		_, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodGet, "http://x/", ""))
		if !errors.Is(err, shutdown) {
			t.Fatalf("err = %v, want the context's cause", err)
		}
	})
}

func TestContextDeadlineDuringAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}}}
		tr := NewTransport(f)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodPost, "http://x/", "b"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("returned after %v", got)
		}
		if e := asError(t, err); e.Attempts != 1 || e.Key == "" {
			t.Errorf("Error = %+v", e)
		}
	})
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}, {block: true}, {status: 200, body: "ok"}}}
		var events []AttemptInfo
		tr := NewTransport(f, WithAttemptTimeout(time.Second), WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second),
			WithOnRetry(func(_ context.Context, e AttemptInfo) { events = append(events, e) }))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/", "b"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantOffsets(1100*time.Millisecond, 1200*time.Millisecond)
		if got := attemptOffsets(start, f.Calls()); !equalDurations(got, want) {
			t.Errorf("attempts at %v, want %v", got, want)
		}
		if len(events) != 2 || events[0].Reason != "attempt-timeout" || !errors.Is(events[0].Err, context.DeadlineExceeded) {
			t.Errorf("events %+v", events)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Errorf("body %q", got)
		}
	})
}

// TestAttemptTimeoutKeepsBody pins that the attempt timeout bounds the wait for
// the headers only: the returned body stays readable after it would have fired,
// and the attempt's context is released when the body is closed.
func TestAttemptTimeoutKeepsBody(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 200, body: "streamed body"}}}
		tr := NewTransport(f, WithAttemptTimeout(time.Second))
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		attemptCtx := f.Calls()[0].req.Context()
		if attemptCtx.Err() != nil {
			t.Fatal("attempt context cancelled before the body was closed")
		}
		if got := readAll(t, resp); got != "streamed body" {
			t.Errorf("body %q", got)
		}
		if attemptCtx.Err() == nil {
			t.Error("attempt context not cancelled when the body was closed")
		}
	})
}

// TestRetryAttemptsCappedByMaxElapsed pins that a retry attempt is cut at the
// operation's time cap.
func TestRetryAttemptsCappedByMaxElapsed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}, {block: true}}}
		tr := NewTransport(f, WithMaxElapsed(2*time.Second), WithAttemptTimeout(10*time.Second),
			WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if resp != nil {
			t.Fatalf("got %d", resp.StatusCode)
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("returned after %v, want the 2s cap", got)
		}
		e := asError(t, err)
		if e.Attempts != 2 || e.LastStatus != 503 || !errors.Is(err, ErrExhausted) || errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(err.Error(), "WithMaxElapsed cap") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestAttemptsExhausted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{err: errConnReset()}, {status: 503}, {err: errConnReset()}}}
		tr := NewTransport(f, WithMaxAttempts(3))
		_, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		e := asError(t, err)
		if e.Attempts != 3 || e.LastStatus != 503 || !errors.Is(err, ErrExhausted) || !errors.Is(err, errConnReset()) {
			t.Errorf("err = %v", err)
		}
		if !strings.Contains(err.Error(), "stopped after 3 attempts") {
			t.Errorf("message %q", err)
		}
	})
}

func TestBudgetRefusesRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		empty := func() *Budget { return newBudget(budgetRatio(0), budgetMinPerSecond(0)) }
		// A response is returned as it is.
		f := &fakeRT{steps: statusSteps(503, 200)}
		resp, err := NewTransport(f, WithRetryBudget(empty())).RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil || resp.StatusCode != 503 || len(f.Calls()) != 1 {
			t.Fatalf("got %v, %v after %d attempts", resp, err, len(f.Calls()))
		}
		_ = resp.Body.Close()
		// An error becomes ErrBudgetExhausted.
		f = &fakeRT{steps: []fakeStep{{err: errConnReset()}, {status: 200}}}
		_, err = NewTransport(f, WithRetryBudget(empty())).RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, errConnReset()) || len(f.Calls()) != 1 {
			t.Fatalf("err = %v after %d attempts", err, len(f.Calls()))
		}
		// With tokens, the same retry is made and recorded.
		b := newBudget()
		f = &fakeRT{steps: statusSteps(503, 200)}
		resp, err = NewTransport(f, WithRetryBudget(b), noWait()).RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil || resp.StatusCode != 200 {
			t.Fatal(resp, err)
		}
		if s := b.Stats(); s.Requests != 1 || s.RetriesAllowed != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestBudgetHoldsHost: a 429 and a 503 with Retry-After hold every operation
// sharing the budget back from that host, and only that host.
func TestBudgetHoldsHost(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBudget()
				var (
					mu    sync.Mutex
					calls []time.Time
				)
				start := time.Now()
				held := make(chan struct{})
				rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					mu.Lock()
					calls = append(calls, time.Now())
					n := len(calls)
					mu.Unlock()
					if n == 1 {
						defer close(held)
						return &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {"5"}}, Body: http.NoBody, Request: req}, nil
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
				})
				tr := NewTransport(rt, WithRetryBudget(b), WithMaxAttempts(1))
				tr.rand = func() float64 { return 0 }
				// Operation A is told 429 or 503 Retry-After: 5 and, with one attempt, returns it.
				resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://h1/", ""))
				if err != nil || resp.StatusCode != code {
					t.Fatal(resp, err)
				}
				<-held
				// Operation B to the same host waits for the hold before its first attempt.
				resp, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://h1/other", ""))
				if err != nil || resp.StatusCode != 200 {
					t.Fatal(resp, err)
				}
				if got := calls[1].Sub(start); got != 5*time.Second {
					t.Errorf("B's first attempt at %v, want 5s", got)
				}
				// Another host is not held.
				tr2 := NewTransport(rt, WithRetryBudget(b))
				b.holdHost("h1", time.Now().Add(time.Minute))
				before := time.Now()
				if resp, err := tr2.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://h2/", "")); err != nil || resp.StatusCode != 200 {
					t.Fatal(resp, err)
				}
				if time.Since(before) != 0 {
					t.Error("an unheld host waited")
				}
				// A hold past the operation's cap fails at once, nothing sent.
				n := len(calls)
				_, err = NewTransport(rt, WithRetryBudget(b), WithMaxElapsed(10*time.Second)).RoundTrip(
					mustRequest(t, context.Background(), http.MethodPost, "http://h1/", "body"))
				if !errors.Is(err, ErrBudgetExhausted) || len(calls) != n || time.Since(before) != 0 {
					t.Errorf("err = %v, %d attempts", err, len(calls)-n)
				}
			})

		})
	}
}

func TestOnRetryAndLogger(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 409}, {err: errConnReset()}, {status: 201}}}
		var events []AttemptInfo
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		tr := NewTransport(f, WithJitter(NoJitter), WithBackoff(10*time.Millisecond, time.Second), WithLogger(logger),
			WithOnRetry(func(_ context.Context, e AttemptInfo) { events = append(events, e) }))
		tr.rand = func() float64 { return 0 } // a bare 409's poll waits pollInterval/2
		resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "K"), http.MethodPost, "http://user:secret@x/pay", "b"))
		if err != nil || resp.StatusCode != 201 {
			t.Fatal(resp, err)
		}
		want := []AttemptInfo{
			{Number: 2, Key: "K", Status: 409, Wait: pollInterval / 2, Reason: "in-progress", Poll: true},
			{Number: 3, Key: "K", Err: errConnReset(), Wait: 20 * time.Millisecond, Reason: "network"},
		}
		if len(events) != len(want) {
			t.Fatalf("events %+v", events)
		}
		for i := range want {
			if events[i] != want[i] {
				t.Errorf("event %d = %+v\nwant %+v", i, events[i], want[i])
			}
		}
		if n := strings.Count(logs.String(), "idem: retrying"); n != 2 || strings.Contains(logs.String(), "secret") {
			t.Errorf("logs:\n%s", logs.String())
		}
	})
}

// TestHoldPlacedDuringWait pins that the host hold is checked before every
// attempt, not only when the wait is chosen.
func TestHoldPlacedDuringWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBudget()
		f := &fakeRT{steps: statusSteps(503, 200)}
		tr := NewTransport(f, WithRetryBudget(b), WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second))
		tr.rand = func() float64 { return 0 }
		start := time.Now()
		go func() {
			time.Sleep(50 * time.Millisecond)
			b.holdHost("h", time.Now().Add(2*time.Second)) // another operation was told Retry-After: 2
		}()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://h/", ""))
		if err != nil || resp.StatusCode != 200 {
			t.Fatal(resp, err)
		}
		if got := f.Calls()[1].at.Sub(start); got != 2050*time.Millisecond {
			t.Errorf("retry at %v, want 2.05s (the end of the hold)", got)
		}

		// A hold that ends past the cap stops the operation before the retry.
		f = &fakeRT{steps: statusSteps(503, 200)}
		tr = NewTransport(f, WithRetryBudget(b), WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second),
			WithMaxElapsed(5*time.Second))
		go func() {
			time.Sleep(50 * time.Millisecond)
			b.holdHost("h", time.Now().Add(time.Minute))
		}()
		_, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://h/", ""))
		if e := asError(t, err); !errors.Is(err, ErrBudgetExhausted) || e.Attempts != 1 || e.LastStatus != 503 {
			t.Errorf("err = %v", err)
		}
		if s := b.Stats(); s.Refunds != 1 {
			t.Errorf("stats %+v: the retry not sent must be refunded", s)
		}
	})
}

// TestFirstAttemptBoundCapped pins that an attempt timeout longer than the
// operation's cap shrinks to the cap.
func TestFirstAttemptBoundCapped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}}}
		tr := NewTransport(f, WithAttemptTimeout(time.Hour), WithMaxElapsed(2*time.Second))
		start := time.Now()
		_, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("returned after %v, want 2s", got)
		}
		// The cap, not the caller's context, ended it: the error says so.
		if !errors.Is(err, ErrExhausted) || errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(err.Error(), "WithMaxElapsed cap") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestHangingFirstAttemptEndsAtCap is the regression test for a first attempt
// with no attempt timeout and no caller deadline: it used to hang past
// WithMaxElapsed (CONTRACT.md §4.2: every call ends within its time cap).
func TestHangingFirstAttemptEndsAtCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}}}
		tr := NewTransport(f, WithMaxElapsed(3*time.Second))
		start := time.Now()
		_, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/", "{}"))
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("returned after %v, want the 3s cap", got)
		}
		var e *Error
		if !errors.As(err, &e) || e.Attempts != 1 || !errors.Is(err, ErrExhausted) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want an *Error after 1 attempt matching ErrExhausted, not DeadlineExceeded", err)
		}
	})
}

// TestCallerDeadlineBoundsFirstAttempt: a caller deadline before the cap bounds
// the first attempt on its own, and the error is the context's.
func TestCallerDeadlineBoundsFirstAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}}}
		tr := NewTransport(f, WithMaxElapsed(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodGet, "http://x/", ""))
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("returned after %v, want the caller's 2s", got)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v", err)
		}
	})
}
