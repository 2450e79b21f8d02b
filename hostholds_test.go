package idem

import (
	"context"
	"errors"
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
