package idem

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// attempt is the single allocation behind an attempt that cannot send the
// caller's request as it is. It holds the copy of the request that is sent,
// the backing array of the Idempotency-Key value of a copied header, and, when
// the Transport bounds the attempt itself, everything the bound needs: the
// attempt's context (an *attempt is a context.Context on top of the caller's)
// and the response body that releases it when closed (see attemptBody).
//
// The attempt is its own context only when the caller's context can never be
// cancelled (Done returns nil), the common case of a request made without a
// context, deadline or cancellation: there is then nothing to propagate from
// the parent. Otherwise it carries a standard context.WithCancel of the
// caller's, so that cancellation and context.Cause behave exactly as the
// standard library's.
type attempt struct {
	req    http.Request // the request sent
	keyVal [1]string    // backs the Idempotency-Key value of a copied header

	// Set by bind.
	parent   context.Context    // the caller's context
	cancelFn context.CancelFunc // a standard context's cancel; nil when a is the context
	body     io.ReadCloser      // the response body that attemptBody wraps

	// The state of a as a context.
	mu     sync.Mutex
	done   chan struct{} // made on first use; closedChan when cancelled first
	err    error         // context.Canceled once cancelled
	after  func()        // the first function registered by AfterFunc
	afters []func()      // the others
}

// bind returns the context of the attempt's request, on top of parent (the
// caller's): one that release, or the bound's timer, cancels.
func (a *attempt) bind(parent context.Context) context.Context {
	a.parent = parent
	if parent.Done() != nil {
		var ctx context.Context
		ctx, a.cancelFn = context.WithCancel(parent)
		return ctx
	}
	return a
}

// release cancels the context of a bound attempt: when its response body is
// closed, when it failed, or when the bound fires. It may be called more than
// once, from any goroutine.
func (a *attempt) release() {
	if a.cancelFn != nil {
		a.cancelFn()
		return
	}
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		return
	}
	a.err = context.Canceled
	if a.done == nil {
		a.done = closedChan
	} else {
		close(a.done)
	}
	f, fs := a.after, a.afters
	a.after, a.afters = nil, nil
	a.mu.Unlock()
	if f != nil {
		f()
	}
	for _, f := range fs {
		f()
	}
}

// closedChan is the Done channel of an attempt cancelled before anyone asked
// for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Deadline returns the caller's deadline: the bound is not a deadline of the
// context, as with context.WithCancel.
func (a *attempt) Deadline() (time.Time, bool) { return a.parent.Deadline() }

// Done returns a channel closed when the attempt is released.
func (a *attempt) Done() <-chan struct{} {
	a.mu.Lock()
	if a.done == nil {
		a.done = make(chan struct{})
	}
	d := a.done
	a.mu.Unlock()
	return d
}

// Err returns context.Canceled once the attempt is released, nil before.
func (a *attempt) Err() error {
	a.mu.Lock()
	err := a.err
	a.mu.Unlock()
	return err
}

// Value returns the caller's context's value for key.
func (a *attempt) Value(key any) any { return a.parent.Value(key) }

// String names the context as context.WithCancel's would.
func (a *attempt) String() string { return "idem.attempt(WithCancel)" }

// AfterFunc arranges for f to be called after the attempt is released, or at
// once in its own goroutine if it already is. The context package calls it to
// link a context derived from the attempt's (net/http derives one for every
// request) without a goroutine. The returned stop function does nothing and
// returns false: the context package uses it only to drop the registration of
// a derived context cancelled on its own, and calling f for such a context
// later is a no-op; all registrations are dropped when the attempt is released.
func (a *attempt) AfterFunc(f func()) (stop func() bool) {
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		go f()
		return noStop
	}
	if a.after == nil {
		a.after = f
	} else {
		a.afters = append(a.afters, f)
	}
	a.mu.Unlock()
	return noStop
}

func noStop() bool { return false }

// attemptBody is the response body of a bound attempt: closing it releases the
// attempt's context. The bound applies to the wait for the response headers
// only; the body outlives it.
type attemptBody attempt

func (b *attemptBody) Read(p []byte) (int, error) { return b.body.Read(p) }

func (b *attemptBody) Close() error {
	err := b.body.Close()
	(*attempt)(b).release()
	return err
}

// expirer is the timer function of a bounded attempt. Expirers are pooled so
// that arming a bound needs no closure: each holds its own func value, made
// once, which calls release on the attempt it is set to. An expirer goes back
// to the pool only when its timer was stopped before firing.
type expirer struct {
	a  *attempt
	fn func()
}

var expirers = sync.Pool{New: func() any {
	e := new(expirer)
	e.fn = e.fire
	return e
}}

func (e *expirer) fire() { e.a.release() }
