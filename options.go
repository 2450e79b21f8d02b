package idem

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// An Option configures a Transport made by NewTransport or NewClient. Options
// are checked when they are made: an impossible value panics there, never
// later on a request (the package documentation gives the message). The same
// rule holds for NewBudget's arguments.
type Option func(*config)

// config is the immutable policy of a Transport.
type config struct {
	bounds     retry.Bounds  // WithMaxAttempts, WithMaxElapsed, WithMaxRetryAfter, WithAttemptTimeout
	backoff    retry.Backoff // WithBackoff, WithJitter
	autoKeys   bool
	keyGen     func() string
	quotedKeys bool // write keys as Structured Field strings
	budget     *Budget
	budgetSet  bool // WithRetryBudget was given: not the Transport's own budget
	onRetry    func(context.Context, AttemptInfo)
	onDone     []func(context.Context, Report)
	retryIf    func(resp *http.Response, err error, retryable bool) bool
	bodyLimit  int64
	logger     *slog.Logger
}

// DefaultMaxElapsed is the cap on one operation when WithMaxElapsed is not
// given: the top of the time ladder of docs/CONTRACT.md, under which the idem
// server's request time (server.DefaultRequestTimeout) and a gateway's
// upstream time-out nest, so that a client on its defaults hears a server's
// answer, a 503 included, before it gives up.
const DefaultMaxElapsed = 30 * time.Second

func defaultConfig() config {
	return config{
		bounds:    retry.Bounds{MaxAttempts: 7, MaxElapsed: 30 * time.Second, MaxRetryAfter: 30 * time.Second},
		backoff:   retry.Backoff{Jitter: FullJitter.kind(), Base: 300 * time.Millisecond, Max: 10 * time.Second},
		autoKeys:  true,
		keyGen:    newKey,
		bodyLimit: 1 << 20, // 1 MiB
	}
}

// badArg panics with "idem: <call>: want <want>", call being the function and
// the value it was given, such as WithMaxAttempts(0): the message of every
// panic for a bad option or argument in this package.
func badArg(call, want string) {
	panic("idem: " + call + ": want " + want)
}

// WithMaxAttempts sets how many attempts one operation may make, counting the
// first (default 7: with the default backoff, their waits span about 9s on
// average, 19s at most, so that an operation rides out an outage of a few
// seconds; see docs/client.md). 1 turns retrying off. It panics if n < 1.
func WithMaxAttempts(n int) Option {
	if n < 1 {
		badArg(fmt.Sprintf("WithMaxAttempts(%d)", n), "n >= 1")
	}
	return func(c *config) { c.bounds.MaxAttempts = n }
}

// WithBackoff sets the exponential backoff: the wait before retry n+1 is drawn
// from min(max, base·2^n) by the Jitter (default base 300ms, max 10s). It panics
// if either is negative or base > max.
func WithBackoff(base, max time.Duration) Option {
	if base < 0 || max < 0 {
		badArg(fmt.Sprintf("WithBackoff(%v, %v)", base, max), "base and max >= 0")
	}
	if base > max {
		badArg(fmt.Sprintf("WithBackoff(%v, %v)", base, max), "base <= max")
	}
	return func(c *config) { c.backoff.Base, c.backoff.Max = base, max }
}

// WithJitter selects how backoff waits are randomised (default FullJitter). It
// panics if j is not one of the Jitter constants.
func WithJitter(j Jitter) Option {
	if !j.valid() {
		badArg(fmt.Sprintf("WithJitter(%d)", int(j)), "one of the Jitter constants")
	}
	return func(c *config) { c.backoff.Jitter = j.kind() }
}

// WithMaxElapsed caps the time one operation may spend retrying (default 30s),
// measured from the start of RoundTrip: no wait that would end past the cap is
// started (the last response or error is returned at once instead), and every
// attempt, the first included, is cut at the cap while it waits for its
// response headers (a caller's deadline that comes first does it instead). It
// panics if d <= 0.
func WithMaxElapsed(d time.Duration) Option {
	if d <= 0 {
		badArg(fmt.Sprintf("WithMaxElapsed(%v)", d), "a positive duration")
	}
	return func(c *config) { c.bounds.MaxElapsed = d }
}

// WithAttemptTimeout bounds each attempt until its response headers arrive
// (default: no bound of its own). A retry attempt's bound shrinks to the time
// left under WithMaxElapsed. The body of the response that RoundTrip returns is
// never cut by it. A timed-out attempt counts as a network error (retried when
// the request may be). An attempt without a key is cut when its time passes; a
// keyed one is not: it goes on while the operation retries, and its answer
// ends the operation if it comes first and is final; when the attempts run
// out while such attempts are still going on, the operation waits for their
// answer until the cap (see the package documentation). 0 means no bound; it panics if d < 0.
func WithAttemptTimeout(d time.Duration) Option {
	if d < 0 {
		badArg(fmt.Sprintf("WithAttemptTimeout(%v)", d), "a duration >= 0")
	}
	return func(c *config) { c.bounds.AttemptTimeout = d }
}

// WithMaxRetryAfter sets the longest Retry-After the Transport waits for
// (default 30s). A 429 or 503 asking for a longer wait ends the operation at
// once and is returned to the caller; a keyed 409 gets one last attempt within
// d (see the package documentation). It panics if d < 0.
func WithMaxRetryAfter(d time.Duration) Option {
	if d < 0 {
		badArg(fmt.Sprintf("WithMaxRetryAfter(%v)", d), "a duration >= 0")
	}
	return func(c *config) { c.bounds.MaxRetryAfter = d }
}

// WithAutoKeys turns the generation of an Idempotency-Key for POST and PATCH
// requests that carry none on or off (default on). Without a key, a POST or
// PATCH is never retried.
func WithAutoKeys(on bool) Option {
	return func(c *config) { c.autoKeys = on }
}

// WithKeyGenerator sets the function that makes the key of an operation that
// is given none (default: a random UUID version 4). UUID version 7 is a ready
// alternative (uuid.NewV7 of github.com/google/uuid). gen must return a new key on every call: the Transport takes a
// generated key to be unknown to every server (its first attempt sends no
// Prefer: wait); a key that must repeat, such as one derived from a business
// id, goes on the request or in the context (ContextWithKey, KeyFor, DeriveKey). A generated key that is not a valid key fails the request with
// ErrInvalidKey. It panics if gen is nil.
func WithKeyGenerator(gen func() string) Option {
	if gen == nil {
		badArg("WithKeyGenerator(nil)", "a function")
	}
	return func(c *config) { c.keyGen = gen }
}

// WithQuotedKeys, when on, writes the keys from the context or the generator to the
// Idempotency-Key header as RFC 8941 Structured Field strings, as the IETF
// draft requires (in double quotes, with `"` and `\` escaped). By default a
// key is written as it is, which Stripe and most servers read; the idem server
// reads both. A key already on the request's header is sent as it is. Off by
// default.
func WithQuotedKeys(on bool) Option {
	return func(c *config) { c.quotedKeys = on }
}

// WithRetryBudget gives the Transport a shared Budget, in place of its own.
// Give the same Budget to every Transport that calls one dependency.
// WithRetryBudget(nil) turns every limit off: every retry the policy allows
// is made.
//
// Without WithRetryBudget each Transport has a budget of its own, on
// the AWS SDK's standard retryer's numbers: a bucket of 500 units, 5 taken by
// a retry (10 after an attempt time-out), 1 given back by each operation
// answered at its first attempt and the retries' cost by one answered after
// retries; it also earns one unit every 200ms, one retry a second. A full
// bucket pays for 100 retries. A retry it cannot pay for is not
// refused: the operation waits for its turn and pays then, or skips the turn
// (sending nothing; the turn counts against WithMaxAttempts) and waits for
// the next. So a burst of operations rides out a short outage, and through a
// long one the Transport sends its first attempts plus about one retry a
// second, whatever its load (see docs/client.md). A shared Budget, in
// contrast, refuses: the operation ends with ErrBudgetExhausted at once.
func WithRetryBudget(b *Budget) Option {
	return func(c *config) { c.budget, c.budgetSet = b, true }
}

// WithOnRetry sets a function called just before the Transport waits for a
// retry, on the goroutine of RoundTrip, with the request's context and the
// AttemptInfo of the retry (its Wait is the wait about to start; Status and
// Err say what the failed attempt came to). A retry the Transport's own budget
// could not pay for when it was decided is reported when its turn has come
// and the quota has paid: its Wait is then the whole time waited, turns
// skipped included, and the wait is over. It must not block for long. It
// panics if fn is nil.
func WithOnRetry(fn func(ctx context.Context, next AttemptInfo)) Option {
	if fn == nil {
		badArg("WithOnRetry(nil)", "a function")
	}
	return func(c *config) { c.onRetry = fn }
}

// WithOnDone adds a function called once per operation, when RoundTrip is
// about to return, with the request's context and the operation's Report. It
// runs on the goroutine of RoundTrip and must not block for long. Several
// WithOnDone functions all run, in the order given. It panics if fn is nil.
func WithOnDone(fn func(ctx context.Context, r Report)) Option {
	if fn == nil {
		badArg("WithOnDone(nil)", "a function")
	}
	return func(c *config) {
		c.onDone = append(c.onDone[:len(c.onDone):len(c.onDone)], fn)
	}
}

// WithRetryIf lets fn change which answers are retried. After each attempt
// the Transport calls fn with the response (its headers only: fn must not
// read or close the body) or the transport error (context.DeadlineExceeded
// for an attempt cut by WithAttemptTimeout), and retryable, what the
// Transport's own rules say; fn returns whether to retry. It may add answers
// (a 425 or 520 that an API uses for "try again") or refuse retries; it
// cannot make a request repeat that may not be (a POST or PATCH without a key
// is sent once whatever fn says), and the other bounds (attempts, the cap,
// the budget, the body) still apply. fn runs on the goroutine of RoundTrip,
// or of a late attempt, and must be safe for concurrent use. It panics if fn
// is nil.
func WithRetryIf(fn func(resp *http.Response, err error, retryable bool) bool) Option {
	if fn == nil {
		badArg("WithRetryIf(nil)", "a function")
	}
	return func(c *config) { c.retryIf = fn }
}

// WithBodyBufferLimit sets how many bytes of a request body without GetBody are
// buffered so that it can be sent again (default 1 MiB). A larger body is sent
// once, never retried. 0 turns buffering off. It panics if n < 0.
func WithBodyBufferLimit(n int64) Option {
	if n < 0 {
		badArg(fmt.Sprintf("WithBodyBufferLimit(%d)", n), "n >= 0")
	}
	return func(c *config) { c.bodyLimit = n }
}

// WithLogger logs each retry, each wait for a host hold and each turn a retry
// waits for the retry quota at level Info; at level Warn, each retry the
// budget refuses, and each operation that gives up: one that ends in an
// *Error, and one that ends on a response it could have retried but did not
// (the attempts or the time ran out, or the request cannot be sent again: a
// stream body, a POST without a key), with the reason (default: no logging).
// A response whose status is not retried is an answer, not logged. It panics
// if l is nil.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		badArg("WithLogger(nil)", "a *slog.Logger")
	}
	return func(c *config) { c.logger = l }
}
