package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// effectKey is the context key of a protected request's effect flag, and
// markKey that of the store's durable mark (ContextWithEffectMark).
type (
	effectKey struct{}
	markKey   struct{}
)

// effectFlag says whether the protected handler's effect may have happened:
// declared (DeclareEffect) or begun (BeginEffect, until CancelEffect).
type effectFlag struct {
	declared atomic.Bool
	begun    atomic.Bool
	// mu serialises BeginEffect's calls, so that the store's mark is made
	// once; marked says it was.
	mu     sync.Mutex
	marked bool
}

// happened reports whether the request's answer is the outcome of an effect
// that may have happened, to be recorded whatever its status.
func (f *effectFlag) happened() bool { return f.declared.Load() || f.begun.Load() }

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
// any later step that can fail. A handler that is about to start such an
// effect and cannot tell afterwards whether it happened (a request sent to an
// API it does not own) calls BeginEffect before it starts.
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
	f.declared.Store(true)
	return true
}

// ErrNotProtected is returned by BeginEffect for a context that belongs to no
// protected request (an unprotected method, or a context not derived from the
// handler's): nothing can be marked, so an effect started now would not be
// protected.
var ErrNotProtected = errors.New("idem/server: the context belongs to no protected request")

// BeginEffect tells the middleware, before a protected handler starts an
// effect it cannot take back (a request forwarded to an upstream it does not
// own, a call to a payment provider), that from now on the effect may have
// happened. It returns once the store has recorded that durably where it can
// (pgstore, redisstore: a mark that survives a crash of this process;
// memstore keeps it in memory, which a crash loses together with every
// record). After a nil error the request's answer is recorded whatever its
// status, exactly as after DeclareEffect, and a crash of the process before
// the record leaves the key outcome-unknown: a retry gets
// ProblemOutcomeUnknown, never a second run. A non-nil error means the mark
// could not be made (the store failed, or the request's context ended): the
// handler must not start the effect and should answer 503. ctx is the
// handler's request context; outside a protected request BeginEffect returns
// ErrNotProtected. Calling it again is a no-op: the store's mark is made once
// per request.
//
// A store that makes no durable mark (memstore, or a store of your own that
// does not call ContextWithEffectMark) gets DeclareEffect's guarantee: the
// answer is recorded whatever its status, and a crash of the process
// before the record leaves the key to that store's crash rules.
func BeginEffect(ctx context.Context) error {
	f, ok := ctx.Value(effectKey{}).(*effectFlag)
	if !ok {
		return ErrNotProtected
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.marked {
		if mark, ok := ctx.Value(markKey{}).(func(context.Context) error); ok {
			if err := mark(ctx); err != nil {
				return fmt.Errorf("idem/server: BeginEffect: the store could not mark the effect: %w", err)
			}
		}
		f.marked = true
	}
	f.begun.Store(true)
	return nil
}

// CancelEffect says that an effect begun with BeginEffect did not start after
// all (nothing left the process: a connection refused before any byte was
// sent). The answer is then judged by its status as if BeginEffect had not
// been called (a 5xx releases the key), and the store clears its durable mark
// when it releases the key. It does not withdraw DeclareEffect. Until the
// release the mark stays: a crash in between leaves the key outcome-unknown,
// the cautious side. A BeginEffect after CancelEffect begins the effect again
// (the mark is still there). Outside a protected request it does nothing.
func CancelEffect(ctx context.Context) {
	if f, ok := ctx.Value(effectKey{}).(*effectFlag); ok {
		f.begun.Store(false)
	}
}

// ContextWithEffectMark is for Store implementations: it returns ctx carrying
// mark, the function BeginEffect calls (once) to record durably that the
// effect of the run in progress may have happened. A Store that can make such
// a mark calls it on the context it passes to RunFunc. A store that marked
// must (see the Store contract): on a release (run said not keep) clear the
// mark with the claim; on a record, replace it; and when a later Do finds a
// mark whose owner is gone (crashed: PostgreSQL transaction gone, Redis lease
// expired past its grace), return OutcomeUnknown, keep the key blocked for the
// record's TTL, and never call run.
//
// mark receives the context BeginEffect was called with (the handler's) and
// must return within its own bound; a non-nil error makes BeginEffect fail,
// and the handler then does not start its effect. ContextWithEffectMark
// panics when mark is nil.
func ContextWithEffectMark(ctx context.Context, mark func(context.Context) error) context.Context {
	if mark == nil {
		badArg("ContextWithEffectMark(ctx, nil)", "a mark function")
	}
	return context.WithValue(ctx, markKey{}, mark)
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
