// Package serverlink is how a protocol adapter of package server in another
// module of idem (the gRPC interceptor, github.com/idemkit/idem/grpc) protects
// its requests under the process's server.Limits and with the effect flag that
// server.DeclareEffect and server.BeginEffect set, exactly as the HTTP
// middleware does. Package server fills the functions when it is initialised;
// an adapter imports package server (for its Store), so they are set before it
// can call them. Limits are passed as *server.Limits, typed any here (this
// package cannot import server); nil is the process's default Limits.
package serverlink

import (
	"context"
	"time"
)

var (
	// Reserve takes n bytes from the Limits' buffer budget, and reports
	// whether they fit; Unreserve gives them back.
	Reserve   func(limits any, n int64) bool
	Unreserve func(limits any, n int64)
	// RequestTimeout is the Limits' request time (0: none).
	RequestTimeout func(limits any) time.Duration
	// Protect returns ctx as a protected request's: server.WaitTurn counts
	// in the Limits, server.DeclareEffect and server.BeginEffect set its
	// flag, which effect reports.
	Protect func(ctx context.Context, limits any) (protected context.Context, effect func() bool)
	// InProgressRetryAfter is the middleware's estimate of when an
	// in-progress answer will exist (its 409's Retry-After), from the
	// recent handler durations' 90th percentile (known false: none yet),
	// the time the duplicate waited and the owner's lease (0: unknown).
	InProgressRetryAfter func(p90 time.Duration, known bool, waited, lease time.Duration) time.Duration
	// NewDurations returns a ring of recent handler durations, as the
	// middleware keeps one, for InProgressRetryAfter's p90.
	NewDurations func() (add func(time.Duration), p90 func() (time.Duration, bool))
	// Recorded reports whether an answer that is the equivalent of the
	// HTTP status is recorded for its key (without a declared effect).
	Recorded func(status int) bool
)
