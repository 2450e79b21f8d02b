package idem

import (
	"errors"
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/retry"
)

// Causes of an *Error. Match them with errors.Is.
var (
	// ErrExhausted means the retry policy ran out while the last attempt
	// still ended in a transport error: every attempt was used (WithMaxAttempts),
	// or the next wait or attempt would have ended past WithMaxElapsed (the
	// message then names the cap; the error does not match
	// context.DeadlineExceeded, since the caller's context is fine) or the
	// context's deadline.
	ErrExhausted = retry.ErrExhausted
	// ErrBudgetExhausted means the retry budget (WithRetryBudget) refused the
	// retry, or the Transport's own budget paid for none of the operation's
	// remaining turns (WithMaxAttempts, the cap), or the budget holds the host back
	// (after a 429 or 503 with Retry-After) until a time past WithMaxElapsed or
	// the context's deadline, so that no attempt could be made; the message
	// says which, and the Report's Stop is "budget" or "host-hold" (or
	// "deadline", and Timeout reports true, when the cap or the deadline came
	// while the Transport's own budget was paying for no turn).
	ErrBudgetExhausted = retry.ErrBudgetExhausted
	// ErrBodyNotReplayable means a retry was wanted but the request body could
	// not be sent again (no GetBody and larger than WithBodyBufferLimit, or
	// GetBody failed).
	ErrBodyNotReplayable = retry.ErrBodyNotReplayable
	// ErrInvalidKey means the request's key (from its header, its context or the
	// key generator) is empty, longer than 255 characters, not visible ASCII, or
	// a malformed Structured Field string (the grammar the idem server reads),
	// or the request carries more than one. Nothing was sent.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
)

// Error is the error RoundTrip returns when an operation ends without an HTTP
// response to return: its last attempt ended in a transport error, or no
// attempt could be made. It says how many attempts were made and why the
// Transport stopped.
//
// errors.Is matches its Cause and its LastErr: ErrExhausted,
// ErrBudgetExhausted, ErrBodyNotReplayable, ErrInvalidKey,
// or the context's error (context.Canceled, context.DeadlineExceeded, or the
// cause given to context.WithCancelCause), and any error the last attempt
// returned.
type Error struct {
	// Attempts is the number of attempts sent (0 when none was).
	Attempts int
	// Key is the operation's idempotency key, or "" if it had none.
	Key string
	// LastErr is the transport error of the last attempt, if any.
	LastErr error
	// LastStatus is the status code of the last response received, or 0 if
	// there was none.
	LastStatus int
	// Cause is why the Transport stopped: one of the sentinel errors above or
	// the context's cause. It is nil when LastErr is an error that may not be
	// retried (a TLS certificate error, an unknown host, ...) or the request
	// may not be repeated (a POST without a key); the message says which.
	Cause error

	detail  string  // an explanation of Cause, for Error
	refusal refusal // why LastErr was not retried, when Cause is nil
	timeout bool    // a deadline or the WithMaxElapsed cap ended the operation
}

// Timeout reports whether the operation ended because time ran out: the
// context's deadline passed (an http.Client's Timeout included), or the next
// wait or attempt would have ended past the deadline or the WithMaxElapsed
// cap. It makes *Error a net.Error, so os.IsTimeout and the Timeout method of
// the *url.Error an http.Client returns see it, as they see net/http's own
// time-outs. Every other *Error answers false.
func (e *Error) Timeout() bool { return e.timeout }

// Error says how many attempts were made and why the Transport stopped.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("idem: ")
	switch e.Attempts {
	case 0:
		b.WriteString("no attempt made")
	case 1:
		b.WriteString("stopped after 1 attempt")
	default:
		b.WriteString("stopped after ")
		b.WriteString(strconv.Itoa(e.Attempts))
		b.WriteString(" attempts")
	}
	b.WriteString(": ")
	switch {
	case e.Cause != nil:
		b.WriteString(strings.TrimPrefix(e.Cause.Error(), "idem: "))
	case e.LastErr != nil && e.refusal == refuseRequest:
		b.WriteString("request not retryable (a method that is not idempotent, without an Idempotency-Key)")
	case e.LastErr != nil:
		b.WriteString("error not retryable")
	default:
		b.WriteString("unknown cause")
	}
	if e.detail != "" {
		b.WriteString(" (")
		b.WriteString(e.detail)
		b.WriteString(")")
	}
	if e.LastErr != nil && e.LastErr != e.Cause {
		b.WriteString("; last error: ")
		b.WriteString(e.LastErr.Error())
	}
	if e.LastStatus != 0 {
		b.WriteString("; last status: ")
		b.WriteString(strconv.Itoa(e.LastStatus))
	}
	return b.String()
}

// Unwrap returns Cause and LastErr, leaving out the nil ones.
func (e *Error) Unwrap() []error {
	switch {
	case e.Cause != nil && e.LastErr != nil:
		return []error{e.Cause, e.LastErr}
	case e.Cause != nil:
		return []error{e.Cause}
	case e.LastErr != nil:
		return []error{e.LastErr}
	}
	return nil
}
