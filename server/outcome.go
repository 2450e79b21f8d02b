package server

import (
	"net/http"
	"strconv"
	"time"
)

// OutcomeEvent describes how the middleware answered one protected request;
// WithOnOutcome receives one per request, after the response was written.
type OutcomeEvent struct {
	// Request is the request as the middleware received it.
	Request *http.Request
	// Key is the parsed Idempotency-Key; empty when it was missing or invalid.
	Key string
	// Outcome is what the store reported; zero when the middleware answered
	// before asking the store (bad key, scope error, body too large) or the
	// store failed.
	Outcome Outcome
	// Status is the status sent; 0 when the handler panicked and the panic was
	// passed on to net/http (the connection is aborted), or when a Guard's
	// handler left its answer to an outer layer.
	Status int
	// Problem is the problem type URI when the middleware answered with a
	// problem of its own (see the Problem constants), else empty.
	Problem string
	// Stored reports that the handler's response was recorded (first
	// executions only).
	Stored bool
	// Err is the error behind a problem answer: a ParseKey error, the scope
	// function's error, a body read error or the store's error.
	Err error
	// Panic is the value the handler panicked with, else nil.
	Panic any
	// HandlerDuration is how long the handler ran; zero when it did not run
	// (or panicked).
	HandlerDuration time.Duration
	// StoreDuration is how long Store.Do took, the handler's run excluded: for
	// a duplicate (a replay, a 409) it includes the time the store waited for
	// the first request with the key (Request.Wait). Zero when the store was
	// not asked.
	StoreDuration time.Duration
	// Waited is how long the store waited for another request with the key
	// (Result.Waited), part of StoreDuration; zero when it did not wait. With
	// OutcomeExecuted it marks a duplicate that ran the handler itself: the
	// first request released the key (its handler answered 5xx or panicked)
	// while this one waited.
	Waited time.Duration
}

// maxLoggedKey is how many bytes of a key LogKey keeps.
const maxLoggedKey = 64

// LogKey returns a key, or a raw Idempotency-Key header value, fit for a log
// line: at most 64 bytes (then "...(N bytes)" saying how long it
// was), with every byte that is not visible ASCII replaced by '?', so that a
// client cannot make a log line huge or forge one. OutcomeEvent.Key is a
// parsed key (at most 255 visible ASCII characters); log a header as received
// through LogKey.
func LogKey(v string) string {
	n := len(v)
	if n > maxLoggedKey {
		v = v[:maxLoggedKey]
	}
	b := []byte(v)
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '?'
		}
	}
	if n > maxLoggedKey {
		return string(b) + "...(" + strconv.Itoa(n) + " bytes)"
	}
	return string(b)
}
