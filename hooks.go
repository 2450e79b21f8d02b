package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// AttemptInfo describes one attempt of an operation. The request that the
// next RoundTripper (the next of NewTransport) receives carries it in its
// context, so that a layer below the Transport (a tracer, a logger) can tell a
// retry from a first attempt; AttemptFromContext reads it. WithOnRetry
// receives the AttemptInfo of the retry about to be made.
type AttemptInfo struct {
	// Number counts the attempts of the operation: 1 for the first, 2 for
	// the first retry, and so on.
	Number int
	// Reason says why the previous attempt was retried, "" on the first
	// attempt. Its values are stable:
	//
	//	"network"          a transport error not known to be permanent
	//	"attempt-timeout"  no response headers within WithAttemptTimeout (or the cap)
	//	"status"           a retryable status: 408, 429, 500, 502, 503 or 504
	//	"in-progress"      a keyed 409: the server is still working on the key
	//	"custom"           the WithRetryIf predicate asked for the retry
	Reason string
	// Wait is how long the operation waited before this attempt (0 on the
	// first attempt unless a host hold delayed it).
	Wait time.Duration
	// Poll reports whether this attempt polls for the answer after a keyed
	// 409.
	Poll bool
	// Key is the Idempotency-Key the attempt sends, "" when it sends none.
	Key string

	// Status is the previous attempt's status code, 0 on the first attempt
	// or when the previous attempt ended in an error.
	Status int
	// Err is the previous attempt's transport error, nil when it got a
	// response or on the first attempt.
	Err error
	// RetryAfter is the wait the previous answer's Retry-After asked for, 0
	// when it had none.
	RetryAfter time.Duration
}

// attemptCtxKey is the context key under which an attempt's request carries
// its AttemptInfo.
type attemptCtxKey struct{}

// attemptContext is the context of an attempt's request: its parent with the
// attempt's AttemptInfo as a value. It is context.WithValue in one allocation
// instead of two (the value and the context), on every attempt.
type attemptContext struct {
	context.Context
	info AttemptInfo
}

func (c *attemptContext) Value(key any) any {
	if key == (attemptCtxKey{}) {
		return &c.info
	}
	return c.Context.Value(key)
}

// AttemptFromContext returns the AttemptInfo that the Transport put in the
// context of an attempt's request, and whether there was one.
func AttemptFromContext(ctx context.Context) (AttemptInfo, bool) {
	a, ok := ctx.Value(attemptCtxKey{}).(*AttemptInfo)
	if !ok {
		return AttemptInfo{}, false
	}
	return *a, true
}

// Report summarises one logical operation (one call of RoundTrip) when it
// ends; WithOnDone receives it.
type Report struct {
	// Method is the request's method ("GET" for "").
	Method string
	// Host is the request's URL.Host.
	Host string
	// Key is the operation's Idempotency-Key, "" when it had none.
	Key string
	// Attempts is the number of attempts sent, the first included.
	Attempts int
	// Polls is how many of those attempts polled after a keyed 409.
	Polls int
	// Skipped is how many retry turns the Transport's own budget could not pay
	// for: they were waited out and nothing was sent. They count against
	// WithMaxAttempts but are not in Attempts.
	Skipped int
	// Status is the status of the response RoundTrip returned, 0 when Err
	// is not nil.
	Status int
	// Err is the error RoundTrip returned, nil when it returned a response.
	Err error
	// Elapsed is the time from the start of RoundTrip to its return.
	Elapsed time.Duration
	// Stop says why the operation ended. Its values are stable:
	//
	//	"success"        a response with a status below 400
	//	"final-status"   a response whose status is not retried (4xx, 501, ...),
	//	                 or that WithRetryIf said not to retry
	//	"not-retryable"  an error known to be permanent, or an answer that could
	//	                 have been retried (an error, a 503) to a request that
	//	                 may not be repeated (a POST or PATCH without a key) or
	//	                 whose body cannot be sent again (a stream); Status is
	//	                 that answer's when it is a response
	//	"exhausted"      the attempts (WithMaxAttempts) or polls ran out, or a
	//	                 Retry-After asked for more than WithMaxRetryAfter
	//	"deadline"       the next wait or attempt would pass the WithMaxElapsed
	//	                 cap or the context's deadline, or one of them passed
	//	"canceled"       the caller's context was cancelled
	//	"budget"         a shared Budget refused a retry, or the Transport's
	//	                 own budget paid for none of the turns left
	//	"host-hold"      the host is held back past the deadline
	//	"invalid-key"    the key is not valid; nothing was sent
	Stop string
	// BudgetRefused reports whether the retry budget refused a retry, or the
	// Transport's own budget could not pay for one when it was decided (the
	// operation then waited for its turn, see Skipped).
	BudgetRefused bool
	// HostHold is the total time the operation waited for a host hold.
	HostHold time.Duration
}

// Reasons for the end of an operation: the values of Report.Stop.
const (
	stopSuccess      = retry.StopSuccess
	stopFinalStatus  = retry.StopFinalStatus
	stopNotRetryable = retry.StopNotRetryable
	stopExhausted    = retry.StopExhausted
	stopDeadline     = retry.StopDeadline
	stopCanceled     = retry.StopCanceled
	stopBudget       = retry.StopBudget
	stopHostHold     = retry.StopHostHold
	stopInvalidKey   = retry.StopInvalidKey
)
