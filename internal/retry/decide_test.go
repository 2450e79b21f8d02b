package retry

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
	base := State{
		Keyed: true, Progress: Progress{Attempts: 2}, MaxAttempts: 5, Replayable: true,
		Time: Times{Left: 20 * time.Second, MaxElapsed: 30 * time.Second, MaxRetryAfter: 30 * time.Second,
			Backoff: 300 * time.Millisecond},
		Random: [2]float64{0.5, 0.5},
	}
	with := func(f func(*State)) State { s := base; f(&s); return s }
	ra := func(status int, d time.Duration) Outcome {
		out := answer(status, 0)
		out.RetryAfter, out.HasRetryAfter = d, true
		return out
	}
	reset := errors.New("connection reset")
	tests := []struct {
		name string
		s    State
		out  Outcome
		want Decision
	}{
		// Stops.
		{"context cancelled, no response", with(func(s *State) { s.CtxStop = "canceled" }), Outcome{Err: reset},
			Decision{Stop: "canceled", FromContext: true}},
		{"context past its deadline, no response", with(func(s *State) { s.CtxStop = "deadline" }), Outcome{Err: reset},
			Decision{Stop: "deadline", FromContext: true}},
		{"a final status", base, answer(404, 0),
			Decision{Stop: "not-retryable", Refusal: RefuseFinal}},
		{"a 409 on the first attempt under a generated key", with(func(s *State) { s.Fresh, s.Attempts = true, 1 }), answer(409, 0),
			Decision{Stop: "not-retryable", Refusal: RefuseFinal}},
		{"an unkeyed POST", with(func(s *State) { s.Keyed = false }), answer(503, 0),
			Decision{Stop: "not-retryable", Refusal: RefuseRequest}},
		{"a body that is not its ContentLength", with(func(s *State) { s.Mismatch = true }), answer(503, 0),
			Decision{Stop: "not-retryable", Refusal: RefuseError}},
		{"the last attempt after a 409 was made", with(func(s *State) { s.LastChance = true }), answer(409, 0),
			Decision{Stop: "deadline", Cause: ErrExhausted, Detail: "the last attempt that fitted before the WithMaxElapsed cap of 30s was made"}},
		{"every attempt used", with(func(s *State) { s.Attempts = 5 }), answer(503, 0),
			Decision{Stop: "exhausted", Cause: ErrExhausted, Detail: "all attempts used"}},
		{"polls do not use attempts", with(func(s *State) { s.Attempts, s.Polls = 7, 3 }), answer(503, 0),
			Decision{Verdict: Retry, Reason: "status", Wait: 300 * time.Millisecond}},
		{"the twentieth poll is made", with(func(s *State) { s.Attempts, s.Polls = 20, 19 }), answer(409, 0),
			Decision{Verdict: Poll, Reason: "in-progress", Wait: 750 * time.Millisecond}},
		{"the twenty-first poll is not made", with(func(s *State) { s.Attempts, s.Polls = 21, 20 }), answer(409, 0),
			Decision{Stop: "exhausted", Cause: ErrExhausted, Detail: "all attempts used"}},
		{"turns the retry quota skipped count as attempts", with(func(s *State) { s.Attempts, s.Skipped = 2, 3 }), answer(503, 0),
			Decision{Stop: "exhausted", Cause: ErrExhausted, Detail: "all attempts used"}},
		{"a turn is left after skipped ones", with(func(s *State) { s.Attempts, s.Skipped = 2, 2 }), answer(503, 0),
			Decision{Verdict: Retry, Reason: "status", Wait: 300 * time.Millisecond}},
		{"a body sent once", with(func(s *State) { s.Replayable = false }), answer(503, 0),
			Decision{Stop: "not-retryable", Cause: ErrBodyNotReplayable}},
		{"a Retry-After past WithMaxRetryAfter on a 503", base, ra(503, 31*time.Second),
			Decision{Stop: "exhausted", Cause: ErrExhausted, Detail: "Retry-After 31s exceeds WithMaxRetryAfter"}},
		{"the next wait ends past the cap", with(func(s *State) { s.Time.Left = 300 * time.Millisecond }), answer(503, 0),
			Decision{Stop: "deadline", Cause: ErrExhausted, Detail: "the next wait of 300ms would end past the WithMaxElapsed cap of 30s"}},
		{"the next wait ends past the caller's deadline", with(func(s *State) { s.Time.Left, s.Time.ByCaller = 100*time.Millisecond, true }), Outcome{Err: reset},
			Decision{Stop: "deadline", Cause: ErrExhausted, Detail: "the next wait of 300ms would end past the context's deadline"}},
		{"a 409 with no time for a last attempt of 100ms", with(func(s *State) { s.Time.Left = 150 * time.Millisecond }), ra(409, 30*time.Second),
			Decision{Stop: "deadline", Cause: ErrExhausted, Detail: "the next wait of 30.5s would end past the WithMaxElapsed cap of 30s"}},

		// Retries and their waits.
		{"a transport error: the backoff", base, Outcome{Err: reset},
			Decision{Verdict: Retry, Reason: "network", Wait: 300 * time.Millisecond}},
		{"an attempt time-out", base, Outcome{TimedOut: true},
			Decision{Verdict: Retry, Reason: "attempt-timeout", Wait: 300 * time.Millisecond}},
		{"an idempotent GET without a key", with(func(s *State) { s.Repeatable, s.Keyed = true, false }), answer(502, 0),
			Decision{Verdict: Retry, Reason: "status", Wait: 300 * time.Millisecond}},
		{"a Retry-After longer than the backoff, plus a tenth at r=0.5", base, ra(503, 2*time.Second),
			Decision{Verdict: Retry, Reason: "status", Wait: 2100 * time.Millisecond}},
		{"a backoff longer than the Retry-After", with(func(s *State) { s.Time.Backoff = 5 * time.Second }), ra(429, time.Second),
			Decision{Verdict: Retry, Reason: "status", Wait: 5 * time.Second}},
		{"a spread of at most 1s", with(func(s *State) { s.Time.Left = 25 * time.Second }), ra(503, 20*time.Second),
			Decision{Verdict: Retry, Reason: "status", Wait: 20*time.Second + 500*time.Millisecond}},
		{"a keyed 409 with Retry-After: that, not the backoff", with(func(s *State) { s.Time.Backoff = 5 * time.Second }), ra(409, time.Second),
			Decision{Verdict: Poll, Reason: "in-progress", Wait: 1050 * time.Millisecond}},
		{"a bare keyed 409: U[0.5s, 1s)", with(func(s *State) { s.Time.Backoff = 5 * time.Second }), answer(409, 0),
			Decision{Verdict: Poll, Reason: "in-progress", Wait: 750 * time.Millisecond}},
		{"a host held longer than the wait", with(func(s *State) { s.Time.Held = 4 * time.Second }), answer(503, 0),
			Decision{Verdict: Retry, Reason: "status", Wait: 4200 * time.Millisecond, HoldPart: 3900 * time.Millisecond}},
		{"a host held shorter than the wait", with(func(s *State) { s.Time.Held = 100 * time.Millisecond }), answer(503, 0),
			Decision{Verdict: Retry, Reason: "status", Wait: 300 * time.Millisecond}},
		{"a keyed 409 past the cap: the last attempt, an attempt time-out before the end",
			with(func(s *State) { s.Time.Left, s.Time.AttemptTimeout = 5*time.Second, time.Second }), ra(409, 30*time.Second),
			Decision{Verdict: Poll, Reason: "in-progress", Wait: 4 * time.Second, LastChance: true}},
		{"a keyed 409 past the cap, no attempt time-out: half of what is left",
			with(func(s *State) { s.Time.Left = 5 * time.Second }), ra(409, 30*time.Second),
			Decision{Verdict: Poll, Reason: "in-progress", Wait: 2500 * time.Millisecond, LastChance: true}},
		{"a keyed 409 past WithMaxRetryAfter: within it", with(func(s *State) { s.Time.Left = time.Hour }), ra(409, 2*time.Hour),
			Decision{Verdict: Poll, Reason: "in-progress", Wait: 15 * time.Second, LastChance: true}},
		{"a custom retry", base, answer(425, 1),
			Decision{Verdict: Retry, Reason: "custom", Wait: 300 * time.Millisecond}},
		{"a custom refusal", base, answer(503, -1),
			Decision{Stop: "not-retryable", Refusal: RefuseFinal}},
		{"a response after the context ended is judged", with(func(s *State) { s.CtxStop = "canceled" }), answer(503, 0),
			Decision{Verdict: Retry, Reason: "status", Wait: 300 * time.Millisecond}},
	}
	for _, tt := range tests {
		got := Decide(tt.s, tt.out)
		if got != tt.want {
			t.Errorf("%s:\nDecide = %+v\nwant     %+v", tt.name, got, tt.want)
		}
	}
}

// answer is an answer with an HTTP status code, classed as the HTTP driver
// classes it, so that the table reads in the contract's words.
func answer(code int, custom int8) Outcome {
	out := Outcome{Class: Final, Code: code, Custom: custom}
	switch code {
	case 408, 429, 500, 502, 503, 504:
		out.Class, out.Holds = Failing, code == 429 || code == 503
	case 409:
		out.Class = InProgress
	}
	return out
}

// TestDecideStopsWithoutTheTime: when an outcome cannot be retried (Op's
// retryable is false), Decide stops whatever Times say, so that the loop
// need not read the clock for it (the success path): the same decision with
// no time left, all of it, and every bound changed.
func TestDecideStopsWithoutTheTime(t *testing.T) {
	t.Parallel()
	reset := errors.New("connection reset")
	keyed := State{Keyed: true, Progress: Progress{Attempts: 1}, MaxAttempts: 5, Replayable: true}
	for _, tc := range []struct {
		name string
		s    State
		out  Outcome
	}{
		{"a success", keyed, answer(201, 0)},
		{"a final status", keyed, answer(404, 0)},
		{"a 409 under a fresh key", State{Keyed: true, Fresh: true, Progress: Progress{Attempts: 1}, MaxAttempts: 5}, answer(409, 0)},
		{"an unkeyed POST's 503", State{Progress: Progress{Attempts: 1}, MaxAttempts: 5}, answer(503, 0)},
		{"a mismatched body", State{Keyed: true, Mismatch: true, Progress: Progress{Attempts: 1}, MaxAttempts: 5}, answer(503, 0)},
		{"the caller's context ended", State{Keyed: true, CtxStop: "canceled", Progress: Progress{Attempts: 1}, MaxAttempts: 5}, Outcome{Err: reset}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := Decide(tc.s, tc.out)
			if want.Verdict != Stop {
				t.Fatalf("verdict %v, want a stop", want.Verdict)
			}
			for _, tm := range []Times{
				{},
				{Left: -time.Second, ByCaller: true},
				{Left: time.Hour, MaxElapsed: time.Hour, MaxRetryAfter: time.Hour, AttemptTimeout: time.Second, Backoff: time.Minute, Held: time.Minute},
			} {
				s := tc.s
				s.Time = tm
				if got := Decide(s, tc.out); got != want {
					t.Errorf("with %+v: %+v, want %+v", tm, got, want)
				}
			}
		})
	}
}
