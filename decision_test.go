package idem

import (
	"errors"
	"testing"
	"time"
)

// TestDecide is the client's retry decision as a table: no transport, no
// clock, the expected answers written out by hand from the contract.
func TestDecide(t *testing.T) {
	t.Parallel()
	// base is a keyed POST's second attempt with plenty of time left.
	base := state{
		method: "POST", keyed: true, attempts: 2, maxAttempts: 5, replayable: true,
		left: 20 * time.Second, maxElapsed: 30 * time.Second, maxRetryAfter: 30 * time.Second,
		backoff: 300 * time.Millisecond, r1: 0.5, r2: 0.5,
	}
	with := func(f func(*state)) state { s := base; f(&s); return s }
	ra := func(status int, d time.Duration) outcome {
		return outcome{status: status, retryAfter: d, hasRetryAfter: true}
	}
	reset := errors.New("connection reset")
	tests := []struct {
		name string
		s    state
		out  outcome
		want decision
	}{
		// Stops.
		{"context cancelled, no response", with(func(s *state) { s.ctxStop = "canceled" }), outcome{err: reset},
			decision{stop: "canceled", fromContext: true}},
		{"context past its deadline, no response", with(func(s *state) { s.ctxStop = "deadline" }), outcome{err: reset},
			decision{stop: "deadline", fromContext: true}},
		{"a final status", base, outcome{status: 404},
			decision{stop: "not-retryable", refusal: refuseFinal}},
		{"a 409 on the first attempt under a generated key", with(func(s *state) { s.fresh, s.attempts = true, 1 }), outcome{status: 409},
			decision{stop: "not-retryable", refusal: refuseFinal}},
		{"an unkeyed POST", with(func(s *state) { s.keyed = false }), outcome{status: 503},
			decision{stop: "not-retryable", refusal: refuseRequest}},
		{"a body that is not its ContentLength", with(func(s *state) { s.mismatch = true }), outcome{status: 503},
			decision{stop: "not-retryable", refusal: refuseError}},
		{"the last attempt after a 409 was made", with(func(s *state) { s.lastChance = true }), outcome{status: 409},
			decision{stop: "deadline", cause: ErrExhausted, detail: "the last attempt that fitted before the WithMaxElapsed cap of 30s was made"}},
		{"every attempt used", with(func(s *state) { s.attempts = 5 }), outcome{status: 503},
			decision{stop: "exhausted", cause: ErrExhausted, detail: "all attempts used"}},
		{"polls do not use attempts", with(func(s *state) { s.attempts, s.polls = 7, 3 }), outcome{status: 503},
			decision{verdict: verdictRetry, reason: "status", wait: 300 * time.Millisecond}},
		{"the twentieth poll is made", with(func(s *state) { s.attempts, s.polls = 20, 19 }), outcome{status: 409},
			decision{verdict: verdictPoll, reason: "in-progress", wait: 750 * time.Millisecond}},
		{"the twenty-first poll is not made", with(func(s *state) { s.attempts, s.polls = 21, 20 }), outcome{status: 409},
			decision{stop: "exhausted", cause: ErrExhausted, detail: "all attempts used"}},
		{"turns the retry quota skipped count as attempts", with(func(s *state) { s.attempts, s.skipped = 2, 3 }), outcome{status: 503},
			decision{stop: "exhausted", cause: ErrExhausted, detail: "all attempts used"}},
		{"a turn is left after skipped ones", with(func(s *state) { s.attempts, s.skipped = 2, 2 }), outcome{status: 503},
			decision{verdict: verdictRetry, reason: "status", wait: 300 * time.Millisecond}},
		{"a body sent once", with(func(s *state) { s.replayable = false }), outcome{status: 503},
			decision{stop: "not-retryable", cause: ErrBodyNotReplayable}},
		{"a Retry-After past WithMaxRetryAfter on a 503", base, ra(503, 31*time.Second),
			decision{stop: "exhausted", cause: ErrExhausted, detail: "Retry-After 31s exceeds WithMaxRetryAfter"}},
		{"the next wait ends past the cap", with(func(s *state) { s.left = 300 * time.Millisecond }), outcome{status: 503},
			decision{stop: "deadline", cause: ErrExhausted, detail: "the next wait of 300ms would end past the WithMaxElapsed cap of 30s"}},
		{"the next wait ends past the caller's deadline", with(func(s *state) { s.left, s.byCaller = 100*time.Millisecond, true }), outcome{err: reset},
			decision{stop: "deadline", cause: ErrExhausted, detail: "the next wait of 300ms would end past the context's deadline"}},
		{"a 409 with no time for a last attempt of 100ms", with(func(s *state) { s.left = 150 * time.Millisecond }), ra(409, 30*time.Second),
			decision{stop: "deadline", cause: ErrExhausted, detail: "the next wait of 30.5s would end past the WithMaxElapsed cap of 30s"}},

		// Retries and their waits.
		{"a transport error: the backoff", base, outcome{err: reset},
			decision{verdict: verdictRetry, reason: "network", wait: 300 * time.Millisecond}},
		{"an attempt time-out", base, outcome{timedOut: true},
			decision{verdict: verdictRetry, reason: "attempt-timeout", wait: 300 * time.Millisecond}},
		{"an idempotent GET without a key", with(func(s *state) { s.method, s.keyed = "GET", false }), outcome{status: 502},
			decision{verdict: verdictRetry, reason: "status", wait: 300 * time.Millisecond}},
		{"a Retry-After longer than the backoff, plus a tenth at r=0.5", base, ra(503, 2*time.Second),
			decision{verdict: verdictRetry, reason: "status", wait: 2100 * time.Millisecond}},
		{"a backoff longer than the Retry-After", with(func(s *state) { s.backoff = 5 * time.Second }), ra(429, time.Second),
			decision{verdict: verdictRetry, reason: "status", wait: 5 * time.Second}},
		{"a spread of at most 1s", with(func(s *state) { s.left = 25 * time.Second }), ra(503, 20*time.Second),
			decision{verdict: verdictRetry, reason: "status", wait: 20*time.Second + 500*time.Millisecond}},
		{"a keyed 409 with Retry-After: that, not the backoff", with(func(s *state) { s.backoff = 5 * time.Second }), ra(409, time.Second),
			decision{verdict: verdictPoll, reason: "in-progress", wait: 1050 * time.Millisecond}},
		{"a bare keyed 409: U[0.5s, 1s)", with(func(s *state) { s.backoff = 5 * time.Second }), outcome{status: 409},
			decision{verdict: verdictPoll, reason: "in-progress", wait: 750 * time.Millisecond}},
		{"a host held longer than the wait", with(func(s *state) { s.held = 4 * time.Second }), outcome{status: 503},
			decision{verdict: verdictRetry, reason: "status", wait: 4200 * time.Millisecond, holdPart: 3900 * time.Millisecond}},
		{"a host held shorter than the wait", with(func(s *state) { s.held = 100 * time.Millisecond }), outcome{status: 503},
			decision{verdict: verdictRetry, reason: "status", wait: 300 * time.Millisecond}},
		{"a keyed 409 past the cap: the last attempt, an attempt time-out before the end",
			with(func(s *state) { s.left, s.attemptTimeout = 5*time.Second, time.Second }), ra(409, 30*time.Second),
			decision{verdict: verdictPoll, reason: "in-progress", wait: 4 * time.Second, lastChance: true}},
		{"a keyed 409 past the cap, no attempt time-out: half of what is left",
			with(func(s *state) { s.left = 5 * time.Second }), ra(409, 30*time.Second),
			decision{verdict: verdictPoll, reason: "in-progress", wait: 2500 * time.Millisecond, lastChance: true}},
		{"a keyed 409 past WithMaxRetryAfter: within it", with(func(s *state) { s.left = time.Hour }), ra(409, 2*time.Hour),
			decision{verdict: verdictPoll, reason: "in-progress", wait: 15 * time.Second, lastChance: true}},
		{"a custom retry", base, outcome{status: 425, custom: 1},
			decision{verdict: verdictRetry, reason: "custom", wait: 300 * time.Millisecond}},
		{"a custom refusal", base, outcome{status: 503, custom: -1},
			decision{stop: "not-retryable", refusal: refuseFinal}},
		{"a response after the context ended is judged", with(func(s *state) { s.ctxStop = "canceled" }), outcome{status: 503},
			decision{verdict: verdictRetry, reason: "status", wait: 300 * time.Millisecond}},
	}
	for _, tt := range tests {
		got := decide(tt.s, tt.out)
		if got != tt.want {
			t.Errorf("%s:\ndecide = %+v\nwant     %+v", tt.name, got, tt.want)
		}
	}
}
