package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// TestHostHoldCappedByMaxRetryAfter: a 503 with Retry-After: 86400 holds the
// host for every operation sharing the budget, but for no longer than
// WithMaxRetryAfter (2s here); without the cap the next operation would fail
// with ErrBudgetExhausted for a day.
func TestHostHoldCappedByMaxRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503, header: http.Header{"Retry-After": {"86400"}}}, {status: 200}}}
		tr := NewTransport(f, noWait(), WithRetryBudget(newBudget()), WithMaxRetryAfter(2*time.Second))
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("first operation: %v, %v; want its 503 back (Retry-After past WithMaxRetryAfter)", resp, err)
		}
		_ = resp.Body.Close()
		start := time.Now()
		resp, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("second operation: %v: the host hold was not capped by WithMaxRetryAfter", err)
		}
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("second operation: %v, %v; want 200 after the capped hold", resp, err)
		}
		_ = resp.Body.Close()
		if waited := time.Since(start); waited < 2*time.Second || waited >= 2*time.Second+200*time.Millisecond {
			t.Errorf("second operation waited %v for the hold, want 2s plus a spread under 200ms", waited)
		}
	})
}

// TestGetBodyFailureRefundsToken: a retry the budget allowed but that is not
// sent (GetBody fails) hands its token back.
func TestGetBodyFailureRefundsToken(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}}}
		b := newBudget()
		tr := NewTransport(f, noWait(), WithRetryBudget(b))
		req := mustRequest(t, context.Background(), http.MethodPut, "http://x/", "body")
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("no second copy") }
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		s := b.Stats()
		if s.RetriesAllowed != 1 || s.Refunds != 1 {
			t.Errorf("budget stats %+v after a GetBody failure: want 1 retry allowed and 1 refunded (err %v)", s, err)
		}
	})
}

// TestLastAttemptAfterConflictNeedsMinimum: after a keyed 409 whose
// Retry-After ends past the deadline, a last attempt is made only when at
// least 100ms of attempt fit: with 150ms left (an attempt's worth of 75ms),
// none is.
func TestLastAttemptAfterConflictNeedsMinimum(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		left      time.Duration
		wantCalls int
	}{
		{150 * time.Millisecond, 1}, // half of it, 75ms, is under the 100ms minimum
		{250 * time.Millisecond, 2}, // 125ms fits
	} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{steps: []fakeStep{{status: 409, header: http.Header{"Retry-After": {"30"}}}, {status: 201}}}
			tr := NewTransport(f, noWait(), WithMaxElapsed(tc.left))
			resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "k"), http.MethodPost, "http://x/", "{}"))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if n := len(f.Calls()); n != tc.wantCalls {
				t.Errorf("with %v left after a 409: %d attempts, want %d", tc.left, n, tc.wantCalls)
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

// TestHostHoldWaitIsSpread: an operation held back by a host hold waits the
// hold plus a spread (a tenth, at most 1s, times a uniform number), so that
// the operations held together do not return to the server in lock-step.
// Both paths: before the first attempt, and before a retry (a hold placed by
// another operation while this one backs off).
func TestHostHoldWaitIsSpread(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503, header: http.Header{"Retry-After": {"2"}}}, {status: 200}}}
		tr := NewTransport(f, noWait(), WithRetryBudget(newBudget()), WithMaxAttempts(1))
		tr.rand = func() float64 { return 0.5 } // spread: 0.5 × min(1s, 2s/10) = 100ms
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/a", ""))
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("operation A: %v, %v; want its 503", resp, err)
		}
		_ = resp.Body.Close()
		start := time.Now()
		resp, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/b", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := time.Since(start); got != 2100*time.Millisecond {
			t.Errorf("before its first attempt B waited %v, want 2.1s: the 2s hold plus its spread", got)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// C backs off 1s after a 500; meanwhile D is told 503 Retry-After: 5.
		// When C wakes, the host is held for 4s more: C waits 4s + 0.5 × 400ms.
		dTold := make(chan struct{})
		var f fakeRT
		rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			switch req.URL.Path {
			case "/d":
				defer close(dTold)
				return &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"5"}}, Body: http.NoBody, Request: req}, nil
			}
			return f.RoundTrip(req)
		})
		f.steps = []fakeStep{{status: 500}, {status: 200}}
		tr := NewTransport(rt, WithJitter(NoJitter), WithBackoff(time.Second, time.Second), WithRetryBudget(newBudget()))
		tr.rand = func() float64 { return 0.5 }
		done := make(chan error, 1)
		go func() {
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/c", ""))
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
		synctest.Wait() // C has had its 500 and is backing off
		resp, err := NewTransport(rt, WithMaxAttempts(1), WithRetryBudget(tr.policy().budget)).RoundTrip(
			mustRequest(t, context.Background(), http.MethodGet, "http://x/d", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		// In the bubble a receive that can never end fails as a deadlock.
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		calls := f.Calls()
		if len(calls) != 2 {
			t.Fatalf("C made %d attempts, want 2", len(calls))
		}
		if got := calls[1].at.Sub(calls[0].at); got != 5200*time.Millisecond {
			t.Errorf("C's retry came %v after its first attempt, want 5.2s: 1s of backoff, then the 4s left of the hold plus its spread", got)
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
