package server

import (
	"context"
	"sync/atomic"
)

// effectKey is the context key of a protected request's effect flag.
type effectKey struct{}

// effectFlag is set once the protected handler has declared its effect.
type effectFlag struct{ done atomic.Bool }

// DeclareEffect tells the middleware that the protected request's effect has
// happened and cannot be undone: a charge at a payment provider, an email
// sent, a write outside the store's transaction. From then on the request's
// answer is recorded and replayed whatever its status: a 5xx (or a refusal,
// or a 3xx) the handler answers afterwards is the operation's outcome, not an
// invitation to run it again. A panic, a refused hijack, a response too large
// to record or an answer left to an outer layer (Guard) after the declaration
// records ProblemOutcomeUnknown (500) for the key: the effect stands and its
// result is not known, so no retry runs the handler again.
//
// Without a declaration a 5xx means "nothing was done": the key is released
// (a transactional store, pgstore with pgstore.Tx, rolls the handler's writes
// back) and a retry runs the handler again. A handler whose effect cannot be
// rolled back calls DeclareEffect as soon as the effect has happened, before
// any later step that can fail.
//
// ctx is the request's context, or one derived from it (a store's context
// passed to the handler carries it too). DeclareEffect may be called from any
// goroutine, more than once. It reports whether ctx belongs to a protected
// request; false (an unprotected method, a context not from the request)
// declares nothing.
func DeclareEffect(ctx context.Context) bool {
	f, ok := ctx.Value(effectKey{}).(*effectFlag)
	if !ok {
		return false
	}
	f.done.Store(true)
	return true
}

// effectContext is a request's context that also carries its effect flag.
// It lives inside the request's exchange, so carrying the flag costs no
// allocation of its own.
type effectContext struct {
	context.Context
	flag *effectFlag
}

func (c *effectContext) Value(key any) any {
	if key == (effectKey{}) {
		return c.flag
	}
	return c.Context.Value(key)
}
