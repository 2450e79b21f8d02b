package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of a Limits.
const (
	// DefaultBufferedBytes bounds the bytes of keyed request bodies that the
	// middleware holds at once, across every request that shares the Limits
	// (64 MiB).
	DefaultBufferedBytes = 64 << 20
	// DefaultWaiting bounds the duplicates that wait at once for the first
	// request with their key (WithInProgressWait).
	DefaultWaiting = 256
	// DefaultRequestTimeout is each protected request's deadline, from the
	// moment the middleware sees it: 25 s, inside the idem client's default
	// cap (idem.DefaultMaxElapsed, 30 s), so that a client on its defaults
	// hears this server's answer, a 503 from a stalled store included, before
	// it gives up; an idempotency gateway's upstream time-out (idem-server's
	// -upstream-timeout, 20 s) nests inside it in turn. docs/CONTRACT.md has
	// the ladder.
	DefaultRequestTimeout = 25 * time.Second
)

// busyRetryAfter is the Retry-After of a 503 answered because the Limits'
// buffer was full.
const busyRetryAfter = time.Second

// Limits bounds what the protected requests of a process hold at once, all
// together, whatever each one may take on its own: the bytes of request bodies
// buffered, the duplicates waiting for the first request with their key, and
// each request's time. One Limits is meant to be shared by every Middleware
// and Guard of a process (WithLimits); those built without WithLimits share
// one Limits with the defaults, so a process is bounded even when nobody set
// one. docs/CONTRACT.md in the repository (§3) says what a request gets when
// a bound is reached:
//
//   - Buffered bytes (LimitBuffered, default DefaultBufferedBytes): a keyed
//     request's body is read whole before the handler runs (the fingerprint
//     is computed from it), and every byte held is taken from this budget as
//     it arrives (a declared Content-Length buys nothing up front beyond the
//     first 16 KiB), until the request is answered. A request whose body does
//     not fit in what is left is answered 503 with Retry-After
//     (ProblemBusy); nothing is claimed or run.
//   - Waiting duplicates (LimitWaiting, default DefaultWaiting): a duplicate
//     that finds its key in progress waits only while fewer than this many
//     wait; past it, it is answered 409 with Retry-After at once, as when
//     its wait is over. A store takes its turn with WaitTurn (memstore,
//     redisstore and pgstore do); the duplicates of a store that does not
//     are not bounded.
//   - Request time (LimitRequestTime, default DefaultRequestTimeout): the
//     context the store and the handler get ends that long after the
//     middleware saw the request, and reading the body stops then (408).
//     A store stalled before the handler ran is answered 503; a handler
//     that honours its context returns, and its answer (a 5xx, after no
//     effect, releases the key) is what the client gets; after the
//     handler ran, a store bounds its last calls (recording or releasing
//     the key) by a time-out of its own, so the answer comes at most that
//     much later (see each store's documentation).
//
// A Limits is safe for concurrent use. Build it with NewLimits; the zero
// value is not usable.
type Limits struct {
	maxBuffered int64
	maxWaiting  int64
	timeout     time.Duration // 0: no deadline

	buffered atomic.Int64
	waiting  atomic.Int64
}

// A LimitOption configures NewLimits. An option with an impossible setting
// panics when it is made, as the package's other options do.
type LimitOption func(*Limits)

// NewLimits returns Limits with the defaults, changed by opts. It panics on a
// nil option.
func NewLimits(opts ...LimitOption) *Limits {
	l := &Limits{maxBuffered: DefaultBufferedBytes, maxWaiting: DefaultWaiting, timeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o == nil {
			badArg("NewLimits(nil LimitOption)", "a LimitOption")
		}
		o(l)
	}
	return l
}

// LimitBuffered sets how many bytes of keyed request bodies may be held at
// once (default DefaultBufferedBytes, 64 MiB); n must be positive. Set it
// above the body limit (WithMaxBodyBytes, 1 MiB by default) times the
// near-limit bodies expected at once: a body that does not fit in what is
// left is answered 503 (ProblemBusy).
func LimitBuffered(n int64) LimitOption {
	if n <= 0 {
		badArg(fmt.Sprintf("LimitBuffered(%d)", n), "n > 0")
	}
	return func(l *Limits) { l.maxBuffered = n }
}

// LimitWaiting sets how many duplicates may wait at once for the first
// request with their key (default DefaultWaiting); n >= 0, 0 answering every
// duplicate 409 at once.
func LimitWaiting(n int) LimitOption {
	if n < 0 {
		badArg(fmt.Sprintf("LimitWaiting(%d)", n), "n >= 0")
	}
	return func(l *Limits) { l.maxWaiting = int64(n) }
}

// LimitRequestTime sets each protected request's deadline, counted from the
// moment the middleware sees the request (default DefaultRequestTimeout,
// 30s); d >= 0, 0 setting none (the request's own context, and the server's
// time-outs, are then the only bounds).
func LimitRequestTime(d time.Duration) LimitOption {
	if d < 0 {
		badArg(fmt.Sprintf("LimitRequestTime(%v)", d), "a duration >= 0")
	}
	return func(l *Limits) { l.timeout = d }
}

// WithLimits makes the middleware count its requests in l, which other
// Middlewares and Guards may share. Without it, a Middleware shares the
// process's default Limits (see Limits). WithLimits(nil) panics.
func WithLimits(l *Limits) Option {
	if l == nil {
		badArg("WithLimits(nil)", "a *Limits from NewLimits")
	}
	return func(c *config) { c.limits = l }
}

// defaultLimits is the Limits of the Middlewares and Guards built without
// WithLimits.
var defaultLimits = NewLimits()

// Buffered returns the bytes of keyed request bodies held now.
func (l *Limits) Buffered() int64 { return l.buffered.Load() }

// Waiting returns the number of duplicates waiting now.
func (l *Limits) Waiting() int64 { return l.waiting.Load() }

// RequestTimeout returns each protected request's deadline (0: none), for a
// server that must fit its own time-outs inside it.
func (l *Limits) RequestTimeout() time.Duration { return l.timeout }

// reserve takes n bytes from the buffer budget; false, taking nothing, when
// they do not fit.
func (l *Limits) reserve(n int64) bool {
	if l.buffered.Add(n) > l.maxBuffered {
		l.buffered.Add(-n)
		return false
	}
	return true
}

// unreserve gives back n bytes.
func (l *Limits) unreserve(n int64) { l.buffered.Add(-n) }

// limitsKey is the context key under which a protected request's context
// carries its Limits (for WaitTurn).
type limitsKey struct{}

// WaitTurn is for Store implementations: Do calls it, with the context the
// middleware passed, before it waits for another owner of its key
// (Request.Wait). ok false means that as many duplicates as the request's
// Limits allow are waiting already: Do must not wait, and answers
// OutcomeInProgress at once (the middleware's 409 carries Retry-After).
// Otherwise Do calls done, once, when its wait ends. A context that is not a
// protected request's (a test's, say) gets ok and a done that does nothing.
func WaitTurn(ctx context.Context) (done func(), ok bool) {
	l, _ := ctx.Value(limitsKey{}).(*Limits)
	if l == nil {
		return func() {}, true
	}
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		return nil, false
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			l.waiting.Add(-1)
		}
	}, true
}

// limitsContext is a protected request's context as the store and the
// handler get it: the effect flag's context (DeclareEffect), which also
// answers WaitTurn with the request's Limits. It lives inside the request's
// exchange, so carrying them costs no allocation of its own.
type limitsContext struct {
	effectContext
	limits *Limits
}

func (c *limitsContext) Value(key any) any {
	if key == (limitsKey{}) {
		return c.limits
	}
	return c.effectContext.Value(key)
}

// deadline returns the request's context bounded by the Limits' request time
// (the request's own context when there is none), and its cancel function.
func (ex *exchange) deadline() (context.Context, context.CancelFunc) {
	d := ex.p.cfg.limits.timeout
	if d <= 0 {
		return ex.r.Context(), func() {}
	}
	return context.WithTimeout(ex.r.Context(), d)
}
