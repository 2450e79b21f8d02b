package retry

import "time"

// Class is what an answer says, in the engine's words: the driver maps its
// transport's codes onto it (an HTTP status, a gRPC code).
type Class uint8

const (
	// NoAnswer: the attempt ended without an answer (Outcome.Err or
	// Outcome.TimedOut says how).
	NoAnswer Class = iota
	// Final: an answer that is not retried (a success, a request the server
	// refuses).
	Final
	// Failing: an answer that says the server could not serve the request
	// now, and a repeat may be served (HTTP 408, 429, 5xx but 501 and 505).
	Failing
	// InProgress: the server is still working on the operation's key (a
	// keyed HTTP 409): the answer exists, or soon will.
	InProgress
)

// Outcome is what one attempt came to, as the engine sees it.
type Outcome struct {
	Class Class
	Code  int   // the transport's code of the answer (an HTTP status), 0 for none; recorded, never read by the rules
	Err   error // the transport's error when Class is NoAnswer
	// Permanent: Err is known to be the same on every attempt (a
	// certificate, a host that does not exist).
	Permanent bool
	TimedOut  bool // the attempt's own bound (the attempt time-out or the cap) cut it
	// RetryAfter is the wait the answer asked for, when it named a valid
	// one (HasRetryAfter).
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Holds: the answer's RetryAfter holds every operation on the host
	// back, through the Limit (an HTTP 429 or 503).
	Holds bool
	// Custom is the word of a caller's predicate: +1 retry, -1 do not, 0 as
	// the table says.
	Custom int8
}

// Refusal says why an outcome is not retried.
type Refusal uint8

const (
	RefuseNone    Refusal = iota // the outcome may be retried
	RefuseFinal                  // a final answer (or one a predicate made final)
	RefuseError                  // an error known to be permanent
	RefuseRequest                // a retryable outcome, but the request may not be repeated (an unkeyed POST)
)

// Reasons for a retry: the values of idem.AttemptInfo.Reason.
const (
	ReasonNetwork        = "network"
	ReasonAttemptTimeout = "attempt-timeout"
	ReasonStatus         = "status"
	ReasonInProgress     = "in-progress"
	ReasonCustom         = "custom"
)

// Classify is the retry table of docs/CONTRACT.md §1 as a pure function:
// given whether the request may be repeated without a key (repeatable: an
// idempotent method), whether the operation is keyed, whether the attempt was
// the first under a key generated for it (fresh), and what the attempt came
// to, it returns why the attempt may be retried, or "" and why not. A
// predicate's verdict (out.Custom) can add a retryable outcome or refuse one;
// it never makes a request repeat that may not be (a POST without a key).
func Classify(repeatable, keyed, fresh bool, out Outcome) (string, Refusal) {
	reason, why := TableReason(keyed, fresh, out)
	switch {
	case out.Custom < 0:
		if reason != "" {
			reason, why = "", RefuseFinal
			if out.Class == NoAnswer {
				why = RefuseError
			}
		}
	case out.Custom > 0 && reason == "":
		reason, why = ReasonCustom, RefuseNone
	}
	switch {
	case reason == "":
		return "", why
	case !repeatable && !keyed:
		return "", RefuseRequest
	}
	return reason, RefuseNone
}

// TableReason is the table alone: why the outcome may be retried when the
// request may be repeated, or "" and why not.
func TableReason(keyed, fresh bool, out Outcome) (string, Refusal) {
	switch {
	case out.TimedOut:
		return ReasonAttemptTimeout, RefuseNone
	case out.Class == NoAnswer && out.Permanent:
		return "", RefuseError
	case out.Class == NoAnswer:
		return ReasonNetwork, RefuseNone
	case out.Class == Failing:
		return ReasonStatus, RefuseNone
	case out.Class == InProgress && keyed && !fresh:
		return ReasonInProgress, RefuseNone
	}
	return "", RefuseFinal
}

// Answered reports whether an operation that ended on out was answered: its
// outcome is neither a failure the table retries nor one a predicate asked
// to retry. A limit is paid back for answered operations only.
func Answered(keyed, fresh bool, out Outcome) bool {
	reason, _ := TableReason(keyed, fresh, out)
	return reason == "" && out.Custom <= 0
}
