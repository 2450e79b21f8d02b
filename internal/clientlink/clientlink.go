// Package clientlink is how a driver of the retry engine in another module of
// idem (the gRPC interceptor, github.com/idemkit/idem/grpc) takes package
// idem's Options, Budgets and hooks as they are, so that a policy written for
// the HTTP Transport means the same over another transport and nothing of it
// is copied. Package idem fills Resolve and KeyFromContext when it is
// initialised; a driver imports package idem (for its Option type), so they
// are set before it can call them.
package clientlink

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// Policy is what a slice of idem Options makes of one driver's operations.
type Policy struct {
	Bounds   retry.Bounds
	Backoff  retry.Backoff
	AutoKeys bool          // WithAutoKeys: a key is generated for a call that may not be repeated without one
	NewKey   func() string // WithKeyGenerator
	// Limit is what retries are paid from: the WithRetryBudget Budget, none
	// for WithRetryBudget(nil), else a budget of the policy's own, of the
	// Transport's kind (one per Resolve).
	Limit  retry.Limit
	Logger *slog.Logger // WithLogger; nil: none

	// Judge returns out with the WithRetryIf predicate's word on it; err is
	// what the attempt came to (nil for a success). Nil without a predicate.
	Judge func(err error, keyed, fresh bool, out retry.Outcome) retry.Outcome
	// Retrying calls WithOnRetry, if set, for the retry n of the operation
	// keyed key.
	Retrying func(ctx context.Context, n retry.Notice, key string)
	// AttemptContext returns ctx carrying the attempt a's idem.AttemptInfo
	// (idem.AttemptFromContext reads it).
	AttemptContext func(ctx context.Context, a retry.Attempt, key string) context.Context
	// Done reports the operation d to every WithOnDone function; nil when
	// there is none.
	Done func(ctx context.Context, d Done)
}

// Done is an operation that ended, as the driver reports it.
type Done struct {
	Method, Host, Key string
	Record            retry.Record
	Start             time.Time
	Err               error  // what the caller gets, nil for a success
	Stop              string // why it ended (retry.Stop*)
}

// Resolve returns the Policy of opts, a []idem.Option; it panics on a nil
// Option, as idem.NewTransport does, naming caller.
var Resolve func(caller string, opts any) Policy

// KeyFromContext returns the key idem.ContextWithKey put in ctx.
var KeyFromContext func(ctx context.Context) (string, bool)
