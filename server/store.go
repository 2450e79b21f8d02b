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
//   - when another owner holds the claim, wait up to Request.Wait for it to finish (see
//     Request.Wait), then return OutcomeInProgress with RetryAfter set from the remaining
//     lease where the store knows it. A fingerprint mismatch against an in-progress claim
//     is reported as OutcomeMismatch. Whatever ends the wait, Result.Waited says how long
//     it lasted;
//   - when the key is marked outcome unknown (an earlier run's response could not be
//     recorded), return OutcomeUnknown and never call run.
//
// A store that can record durably, outside the run, that the run's effect may have
// begun (a request forwarded to an API it does not own: see BeginEffect) passes run a
// context made by ContextWithEffectMark, whose mark function writes that mark on the
// caller's claim (a compare-and-set on the owner token, as durable as the claim: with
// the replicas' acknowledgement where the claim has it) and returns only once it is
// written. A store that marked must then:
//
//   - on a release (run said not keep: a 5xx after CancelEffect), clear the mark with
//     the claim, so that a retry runs;
//   - on a record, replace the mark with the record (a retry replays it);
//   - while the marked claim's owner lives, answer a duplicate as for any claim (wait,
//     then OutcomeInProgress);
//   - when a later Do finds a marked claim whose owner is gone (its process crashed: a
//     PostgreSQL transaction gone, a Redis lease expired past its grace), return
//     OutcomeUnknown instead of taking the key over, keep the key blocked for the
//     record's TTL, and never call run: the effect may have happened and its answer is
//     lost, so running again could repeat it.
//
// A store that makes no such mark (memstore, whose records a crash loses with the
// process) never calls ContextWithEffectMark, and BeginEffect then only sets the
// request's effect flag, as DeclareEffect does.
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
// (for example a lost Redis lease, Redis unreachable, or a failed PostgreSQL commit)
// returns an error wrapping ErrNotRecorded; the middleware then does not send the
// unrecorded response and answers with ProblemOutcomeUnknown, never inviting a retry.
// Such a store must not let the claim expire into a second run of the handler: it
// keeps the key blocked (marked outcome unknown, with the record's TTL, where it can
// write) unless it knows the effect did not happen (a PostgreSQL transaction rolled
// back with the business write in it). Each store documents what it does.
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
	// Wait is how long Do may wait for another owner of the claim to finish before it
	// returns OutcomeInProgress; zero means answer at once. The middleware sets it to
	// the smaller of its own limit and the client's Prefer: wait. While it waits a store
	// holds nothing the owner needs (no lock or connection the owner waits for), stops
	// when ctx is done, and, when the owner finishes, replays its record; when the owner
	// releases the claim instead (5xx, panic, crash), the waiter claims the key and
	// calls run itself, exactly as if it had arrived first.
	Wait time.Duration
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
	// OutcomeUnknown: an earlier run of the handler for this key had an effect whose
	// response could not be recorded; the key stays blocked until its record would have
	// expired (or an operator clears it), and the handler is never run again for it.
	OutcomeUnknown
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
	case OutcomeUnknown:
		return "outcome-unknown"
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
	// where the store knows it (zero if unknown). The middleware's 409 Retry-After is a
	// shorter estimate, never more than this.
	RetryAfter time.Duration
	// Waited is how long Do waited for another owner of the claim to finish
	// (Request.Wait) before this outcome, whichever it is: a replay of the
	// owner's record, OutcomeInProgress when the wait ran out or ctx ended, or
	// OutcomeExecuted when the owner released the key and this request claimed
	// it and ran. It runs from the first time Do found the key claimed until it
	// stopped waiting (the look that ended the wait, or run, excluded). Zero when
	// Do did not wait.
	Waited time.Duration
}

// ErrNotRecorded is wrapped by a Store's error when the handler ran but its
// response could not be recorded (lost lease, failed commit).
var ErrNotRecorded = errors.New("idem/server: response not recorded")

// A Pinger is a Store that can tell whether it can serve requests now: a
// readiness check (the demo's /readyz) calls Ping, and takes a store that
// does not implement it (memstore, which cannot be unreachable) as ready.
// Ping must return within ctx's deadline, and an error when the store
// could not answer a Do.
type Pinger interface {
	Ping(ctx context.Context) error
}
