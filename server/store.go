package server

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// A Store keeps idempotency records and decides how the protected handler runs.
//
// The middleware calls Do once per keyed request (more than once only when it is
// configured to wait for an in-progress duplicate). Do must, atomically with respect
// to every other caller that shares the store (other goroutines, other processes):
//
//   - claim (Scope, Key) when no live record exists (none, or expired), call run exactly
//     once, and then, if run says keep, record its response with the request's
//     fingerprint and TTL before returning OutcomeExecuted; if run says not to keep
//     (5xx, panic, client gone before completion), release the claim so that a retry
//     runs again, and still return OutcomeExecuted with the handler's response;
//   - when a finished record exists and its fingerprint differs, return OutcomeMismatch
//     and change nothing;
//   - when a finished record exists with the same fingerprint, return OutcomeReplayed
//     with the stored response, byte for byte;
//   - when another owner holds the claim, return OutcomeInProgress (a store may first
//     wait a bounded time for the owner to finish and then replay), with RetryAfter set
//     from the remaining lease where the store knows it. A fingerprint mismatch against
//     an in-progress claim is reported as OutcomeMismatch.
//
// Every state change (record, release) is a compare-and-set on (Scope, Key, owner
// token): a holder that lost its claim can neither overwrite nor delete a newer
// owner's record. State changes after run returns must use a context detached from
// the request (context.WithoutCancel), so a client that disconnects still releases or
// records the claim.
//
// Do returns a non-nil error only when the store itself failed (unreachable, timed
// out, lost its lease, could not commit). If the error happened before run was
// called, run must not have been called; the middleware answers 503 and the handler
// never runs unprotected. A store that cannot record a response after run returned
// (for example a lost Redis lease or a failed PostgreSQL commit) returns an error
// wrapping ErrNotRecorded; the middleware then answers 503 and does not send the
// unrecorded response.
//
// If run panics, Do must release the claim (or roll back) and let the panic
// continue; the middleware itself recovers panics inside run, so this is a second
// line of defence.
type Store interface {
	Do(ctx context.Context, req Request, run RunFunc) (Result, error)
}

// Request is what the middleware asks a Store to do for one keyed request.
type Request struct {
	// Scope is the principal or tenant the key belongs to; records of one scope are
	// never visible to another. It may be empty (one global scope).
	Scope string
	// Key is the parsed Idempotency-Key: 1 to 255 visible ASCII characters.
	Key string
	// Fingerprint identifies the request's content (method, path, body), hex encoded.
	Fingerprint string
	// TTL is how long a finished record lives; after it the key is a new operation.
	TTL time.Duration
	// LockTTL is how long a claim lives without renewal. Stores that run the handler
	// in-process renew it while the handler runs; it bounds how long a crashed
	// owner's claim blocks the key.
	LockTTL time.Duration
}

// RunFunc runs the protected handler once. ctx is the context the handler must see:
// the request's context, possibly carrying store state (a PostgreSQL transaction)
// and cancelled if the store loses its claim. keep reports whether resp may be
// recorded (false for 5xx answers, panics and handlers that streamed or hijacked).
type RunFunc func(ctx context.Context) (resp *Response, keep bool)

// Response is a captured response as a Store records and replays it.
type Response struct {
	Status int
	// Header holds only the allow-listed headers (Content-Type, Location, ETag and
	// configured ones). Stores must round-trip it exactly, including repeated values.
	Header http.Header
	// Body is the exact response body; stores must be binary-safe.
	Body []byte
}

// Outcome says what Do did.
type Outcome int

const (
	// OutcomeExecuted: this request claimed the key and the handler ran.
	OutcomeExecuted Outcome = iota + 1
	// OutcomeReplayed: a finished record with the same fingerprint exists; Response is it.
	OutcomeReplayed
	// OutcomeMismatch: the key is in use with another fingerprint.
	OutcomeMismatch
	// OutcomeInProgress: another owner holds the claim and has not finished.
	OutcomeInProgress
)

func (o Outcome) String() string {
	switch o {
	case OutcomeExecuted:
		return "executed"
	case OutcomeReplayed:
		return "replayed"
	case OutcomeMismatch:
		return "mismatch"
	case OutcomeInProgress:
		return "in-progress"
	}
	return "unknown"
}

// Result is what Do reports.
type Result struct {
	Outcome Outcome
	// Response is the handler's response (OutcomeExecuted) or the stored one
	// (OutcomeReplayed); nil otherwise.
	Response *Response
	// RetryAfter is, for OutcomeInProgress, the remaining lease of the current owner
	// where the store knows it (zero if unknown).
	RetryAfter time.Duration
}

// ErrNotRecorded is wrapped by a Store's error when the handler ran but its
// response could not be recorded (lost lease, failed commit).
var ErrNotRecorded = errors.New("idem/server: response not recorded")
