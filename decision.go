package idem

import (
	"time"
)

// verdict is what decide makes of an attempt.
type verdict uint8

const (
	verdictStop  verdict = iota // end the operation
	verdictRetry                // wait, then make another attempt
	verdictPoll                 // wait, then ask again for the answer of a keyed 409
)

// state is what decide knows of the operation when an attempt has ended: all
// of it values, so that decide is a pure function.
type state struct {
	method string
	keyed  bool // the operation has an Idempotency-Key
	// fresh: the attempt was the first under a key generated for this
	// operation, which no server can have in progress.
	fresh bool

	attempts    int  // attempts made, the one just ended included
	skipped     int  // turns skipped (the default retry quota was empty): they count as attempts made
	polls       int  // of which polls, the one just ended included when it was one
	maxAttempts int  // WithMaxAttempts
	replayable  bool // the body can be sent again
	mismatch    bool // the body is not its ContentLength: sent once, to fail as net/http fails
	lastChance  bool // the attempt was the last one that fitted after a 409

	// ctxStop is "canceled" or "deadline" when the caller's context has
	// ended, "" while it runs.
	ctxStop string

	left           time.Duration // until the deadline (the cap or the caller's, the earlier)
	byCaller       bool          // that deadline is the caller's, not the cap
	maxElapsed     time.Duration // WithMaxElapsed, the cap
	maxRetryAfter  time.Duration // WithMaxRetryAfter
	attemptTimeout time.Duration // WithAttemptTimeout, 0 for none
	backoff        time.Duration // the backoff's next wait, drawn for this decision
	held           time.Duration // how much longer the host is held back, 0 if it is not
	r1, r2         float64       // uniform numbers in [0, 1) for the spreads
}

// decision is decide's answer: retry or poll after wait, or stop with a
// reason.
type decision struct {
	verdict    verdict
	reason     string        // why the retry (AttemptInfo.Reason)
	wait       time.Duration // before the next attempt
	holdPart   time.Duration // of wait, the part a host hold added
	lastChance bool          // the next attempt is the last one that fits after a 409

	stop        string // why the operation ends (Report.Stop)
	cause       error  // the *Error's cause when there is no response to return; nil: the last error as it is
	fromContext bool   // the cause is the context's
	detail      string
	refusal     refusal // why the outcome is not retried, when that is the reason
	late        bool    // a late attempt's answer ends the operation (see late.go)
}

// maxPolls bounds the retries after a 409 in progress in one operation: 20
// polls, about 15s of them without Retry-After (see pollInterval), half the
// default cap.
const maxPolls = 20

// pollInterval bounds the wait before a poll after a keyed 409 without
// Retry-After: the wait is drawn from [pollInterval/2, pollInterval).
const pollInterval = time.Second

// maxSpread bounds the random spread added to a wait the server named.
const maxSpread = time.Second

// minLastAttempt is the shortest attempt worth making after a 409 whose
// Retry-After ends past the deadline.
const minLastAttempt = 100 * time.Millisecond

// decide is the client's whole retry decision for one ended attempt: given
// what the attempt came to and the operation's state, it says whether to
// retry (and after what wait) or to stop (and why). Every rule is one step,
// in the order it applies.
func decide(s state, out outcome) decision {
	// The caller's context ended the attempt: stop at once with its cause.
	// (A response that came is still judged: the wait ends at once anyway.)
	if out.status == 0 && s.ctxStop != "" {
		return decision{stop: s.ctxStop, fromContext: true}
	}

	// May this outcome be repeated at all?
	reason, why := classify(s.method, s.keyed, s.fresh, out)
	if s.mismatch {
		reason, why = "", refuseError // net/http's error, as it is
	}
	if reason == "" {
		return decision{stop: stopNotRetryable, refusal: why}
	}

	// The last attempt that fitted after a 409 was made.
	if s.lastChance {
		return decision{stop: stopDeadline, cause: ErrExhausted,
			detail: "the last attempt that fitted before " + deadlineName(s.byCaller, s.maxElapsed) + " was made"}
	}

	// Every attempt is used. A 409 in progress is a poll for an answer that
	// exists or soon will, not a failure: it does not use up an attempt, but
	// at most maxPolls are made.
	inProgress := reason == reasonInProgress
	polls := s.polls
	if inProgress {
		polls++
	}
	if s.attempts+s.skipped-polls >= s.maxAttempts || polls > maxPolls {
		return decision{stop: stopExhausted, cause: ErrExhausted, detail: "all attempts used"}
	}

	// The body cannot be sent again.
	if !s.replayable {
		return decision{stop: stopNotRetryable, cause: ErrBodyNotReplayable}
	}

	// The server asks for more than we wait (after a 409, the deadline
	// decides instead, below).
	if out.hasRetryAfter && out.retryAfter > s.maxRetryAfter && !inProgress {
		return decision{stop: stopExhausted, cause: ErrExhausted,
			detail: "Retry-After " + out.retryAfter.String() + " exceeds WithMaxRetryAfter"}
	}

	// The wait: the backoff, or the server's word.
	ra := out.retryAfter
	var wait time.Duration
	switch {
	case inProgress && ra > 0:
		// The server named when its answer will be ready: backing off past
		// that only delays it.
		wait = ra + spread(ra, s.r1)
	case inProgress:
		// No word from the server: the answer may exist already, poll soon.
		wait = pollInterval/2 + scaleDuration(pollInterval/2, s.r1)
	case ra > 0:
		wait = max(s.backoff, ra+spread(ra, s.r1))
	default:
		wait = s.backoff
	}
	// A host held back by the budget is waited for, spread.
	var holdPart time.Duration
	if s.held > wait {
		held := s.held + spread(s.held, s.r2)
		holdPart, wait = held-wait, held
	}

	// The next wait would end past the cap or the caller's deadline. After a
	// 429 or 503 that is the end: the server asked for room. After a 409
	// (whose wait also stops at WithMaxRetryAfter), if one meaningful attempt
	// still fits, wait what remains less that attempt, and make it.
	d := decision{verdict: verdictRetry, reason: reason, wait: wait, holdPart: holdPart}
	if inProgress {
		d.verdict = verdictPoll
		left := s.left
		if ra > s.maxRetryAfter {
			left = min(left, s.maxRetryAfter)
		}
		if wait >= left {
			last, ok := lastAttemptWait(left, s.attemptTimeout)
			if !ok {
				return decision{stop: stopDeadline, cause: ErrExhausted,
					detail: "the next wait of " + wait.String() + " would end past " + deadlineName(s.byCaller, s.maxElapsed)}
			}
			d.wait, d.holdPart, d.lastChance = last, 0, true
		}
		return d
	}
	if wait >= s.left {
		return decision{stop: stopDeadline, cause: ErrExhausted,
			detail: "the next wait of " + wait.String() + " would end past " + deadlineName(s.byCaller, s.maxElapsed)}
	}
	return d
}

// deadlineName names what bounds the operation: the caller's deadline or the
// cap.
func deadlineName(byCaller bool, maxElapsed time.Duration) string {
	if byCaller {
		return "the context's deadline"
	}
	return "the WithMaxElapsed cap of " + maxElapsed.String()
}

// lastAttemptWait returns the wait before one last attempt, after a 409 whose
// Retry-After ends past the deadline (or past WithMaxRetryAfter): of the time
// left, all but one attempt's worth (attemptTimeout, or half of what is left
// without one). It reports false when that attempt would be shorter than
// minLastAttempt.
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

// spread returns U[0, min(1s, d/10)) for the uniform number r, added to a
// wait the server named so that clients told the same thing do not return in
// lock-step.
func spread(d time.Duration, r float64) time.Duration {
	return scaleDuration(min(maxSpread, d/10), r)
}
