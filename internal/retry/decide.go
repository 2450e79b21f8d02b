package retry

import (
	"time"

	"github.com/idemkit/idem/internal/jitter"
)

// Verdict is what Decide makes of an attempt.
type Verdict uint8

const (
	Stop  Verdict = iota // end the operation
	Retry                // wait, then make another attempt
	Poll                 // wait, then ask again for the answer of a keyed InProgress
)

// State is what Decide knows of the operation when an attempt has ended: all
// of it values, so that Decide is a pure function.
type State struct {
	Repeatable bool // the request may be repeated without a key (an idempotent method)
	Keyed      bool // the operation has an idempotency key
	// Fresh: the attempt was the first under a key generated for this
	// operation, which no server can have in progress.
	Fresh bool

	Progress        // attempts, skipped turns, polls, last chance
	MaxAttempts int // WithMaxAttempts
	Replayable  bool
	Mismatch    bool // the body is not its announced length: sent once, to fail as the transport fails

	CtxStop string // "canceled" or "deadline" when the caller's context has ended, "" while it runs

	Time   Times      // the time left and the bounds
	Random [2]float64 // uniform numbers in [0, 1) for the spreads
}

// Progress is how far an operation has come: what Decide counts.
type Progress struct {
	Attempts   int  // attempts made, the one just ended included
	Skipped    int  // turns skipped (the limit could not pay): they count as attempts made
	Polls      int  // of which polls, the one just ended included when it was one
	LastChance bool // the attempt was the last one that fitted after an InProgress
}

// Times is what Decide knows of time.
type Times struct {
	Left           time.Duration // until the deadline (the cap or the caller's, the earlier)
	ByCaller       bool          // that deadline is the caller's, not the cap
	MaxElapsed     time.Duration // WithMaxElapsed, the cap
	MaxRetryAfter  time.Duration // WithMaxRetryAfter
	AttemptTimeout time.Duration // WithAttemptTimeout, 0 for none
	Backoff        time.Duration // the backoff's next wait, drawn for this decision
	Held           time.Duration // how much longer the host is held back, 0 if it is not
}

// Decision is Decide's answer: retry or poll after Wait, or stop with a
// reason. Stop decisions also come from the loop itself (a cancelled wait, a
// refused retry).
type Decision struct {
	Verdict    Verdict
	Reason     string        // why the retry (AttemptInfo.Reason)
	Wait       time.Duration // before the next attempt
	HoldPart   time.Duration // of Wait, the part a host hold added
	LastChance bool          // the next attempt is the last one that fits after an InProgress

	Stop        string // why the operation ends (Report.Stop)
	Cause       error  // the error's cause when there is no answer to return; nil: the last error as it is
	FromContext bool   // the cause is the context's
	Detail      string
	Refusal     Refusal // why the outcome is not retried, when that is the reason
	Late        bool    // a late attempt's answer ends the operation
}

// MaxPolls bounds the retries after an InProgress in one operation: 20
// polls, about 15s of them without a Retry-After (see PollInterval), half the
// default cap.
const MaxPolls = 20

// PollInterval bounds the wait before a poll after an InProgress without a
// Retry-After: the wait is drawn from [PollInterval/2, PollInterval).
const PollInterval = time.Second

// maxSpread bounds the random spread added to a wait the server named.
const maxSpread = time.Second

// minLastAttempt is the shortest attempt worth making after an InProgress
// whose Retry-After ends past the deadline.
const minLastAttempt = 100 * time.Millisecond

// Decide is the client's whole retry decision for one ended attempt: given
// what the attempt came to and the operation's state, it says whether to
// retry (and after what wait) or to stop (and why). Every rule is one step,
// in the order it applies.
func Decide(s State, out Outcome) Decision {
	// The caller's context ended the attempt: stop at once with its cause.
	// (An answer that came is still judged: the wait ends at once anyway.)
	if out.Class == NoAnswer && s.CtxStop != "" {
		return Decision{Stop: s.CtxStop, FromContext: true}
	}

	// May this outcome be repeated at all?
	reason, why := Classify(s.Repeatable, s.Keyed, s.Fresh, out)
	if s.Mismatch {
		reason, why = "", RefuseError // the transport's error, as it is
	}
	if reason == "" {
		return Decision{Stop: StopNotRetryable, Refusal: why}
	}

	// The last attempt that fitted after an InProgress was made.
	if s.LastChance {
		return Decision{Stop: StopDeadline, Cause: ErrExhausted,
			Detail: "the last attempt that fitted before " + deadlineName(s.Time) + " was made"}
	}

	// Every attempt is used. An InProgress is a poll for an answer that
	// exists or soon will, not a failure: it does not use up an attempt, but
	// at most MaxPolls are made.
	inProgress := reason == ReasonInProgress
	polls := s.Polls
	if inProgress {
		polls++
	}
	if s.Attempts+s.Skipped-polls >= s.MaxAttempts || polls > MaxPolls {
		return Decision{Stop: StopExhausted, Cause: ErrExhausted, Detail: "all attempts used"}
	}

	// The body cannot be sent again.
	if !s.Replayable {
		return Decision{Stop: StopNotRetryable, Cause: ErrBodyNotReplayable}
	}

	// The server asks for more than we wait (after an InProgress, the
	// deadline decides instead, in pollDecision).
	if out.HasRetryAfter && out.RetryAfter > s.Time.MaxRetryAfter && !inProgress {
		return Decision{Stop: StopExhausted, Cause: ErrExhausted,
			Detail: "Retry-After " + out.RetryAfter.String() + " exceeds WithMaxRetryAfter"}
	}

	d := Decision{Verdict: Retry, Reason: reason}
	d.Wait, d.HoldPart = waitFor(s, out, inProgress)
	if inProgress {
		return pollDecision(s, out, d)
	}
	// The next wait would end past the cap or the caller's deadline: after
	// a 429 or 503 that is the end, the server asked for room.
	if d.Wait >= s.Time.Left {
		return pastDeadline(s.Time, d.Wait)
	}
	return d
}

// waitFor returns the wait before the retry of out, and the part of it a
// host hold added: the backoff, or the server's word, and at least the host
// hold, spread.
func waitFor(s State, out Outcome, inProgress bool) (wait, holdPart time.Duration) {
	ra := out.RetryAfter
	switch {
	case inProgress && ra > 0:
		// The server named when its answer will be ready: backing off past
		// that only delays it.
		wait = ra + spread(ra, s.Random[0])
	case inProgress:
		// No word from the server: the answer may exist already, poll soon.
		wait = PollInterval/2 + jitter.Scale(PollInterval/2, s.Random[0])
	case ra > 0:
		wait = max(s.Time.Backoff, ra+spread(ra, s.Random[0]))
	default:
		wait = s.Time.Backoff
	}
	if s.Time.Held > wait {
		held := s.Time.Held + spread(s.Time.Held, s.Random[1])
		return held, held - wait
	}
	return wait, 0
}

// pollDecision is the poll d after an InProgress, or the end: when its wait
// (which also stops at WithMaxRetryAfter) would end past the cap or the
// caller's deadline, and one meaningful attempt still fits, it waits what
// remains less that attempt, and makes it.
func pollDecision(s State, out Outcome, d Decision) Decision {
	d.Verdict = Poll
	left := s.Time.Left
	if out.RetryAfter > s.Time.MaxRetryAfter {
		left = min(left, s.Time.MaxRetryAfter)
	}
	if d.Wait < left {
		return d
	}
	last, ok := lastAttemptWait(left, s.Time.AttemptTimeout)
	if !ok {
		return pastDeadline(s.Time, d.Wait)
	}
	d.Wait, d.HoldPart, d.LastChance = last, 0, true
	return d
}

// pastDeadline is the end of an operation whose next wait would end past
// its deadline.
func pastDeadline(t Times, wait time.Duration) Decision {
	return Decision{Stop: StopDeadline, Cause: ErrExhausted,
		Detail: "the next wait of " + wait.String() + " would end past " + deadlineName(t)}
}

// deadlineName names what bounds the operation: the caller's deadline or the
// cap.
func deadlineName(t Times) string {
	if t.ByCaller {
		return "the context's deadline"
	}
	return "the WithMaxElapsed cap of " + t.MaxElapsed.String()
}

// lastAttemptWait returns the wait before one last attempt, after an
// InProgress whose Retry-After ends past the deadline (or past
// WithMaxRetryAfter): of the time left, all but one attempt's worth
// (attemptTimeout, or half of what is left without one). It reports false
// when that attempt would be shorter than minLastAttempt.
func lastAttemptWait(left, attemptTimeout time.Duration) (time.Duration, bool) {
	worth := left / 2
	if attemptTimeout > 0 && attemptTimeout < left {
		worth = attemptTimeout
	}
	if worth < minLastAttempt {
		return 0, false
	}
	return left - worth, true
}

// Spread returns U[0, min(1s, d/10)) for the uniform number r, added to a
// wait the server named so that clients told the same thing do not return in
// lock-step.
func spread(d time.Duration, r float64) time.Duration {
	return jitter.Scale(min(maxSpread, d/10), r)
}

// Spread is spread for the drivers: the spread of a host hold waited for
// before an attempt.
func Spread(d time.Duration, r float64) time.Duration { return spread(d, r) }
