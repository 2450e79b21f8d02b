package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Defaults of the middleware's options.
const (
	// MaxKeyLength is the longest Idempotency-Key accepted, in characters.
	MaxKeyLength = 255
	// DefaultTTL is how long a finished record lives.
	DefaultTTL = 24 * time.Hour
	// DefaultLockTTL is how long a claim lives without renewal.
	DefaultLockTTL = 30 * time.Second
	// DefaultMaxBodyBytes bounds the request body of a keyed request (1 MiB).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxResponseBytes bounds the response body that is recorded (1 MiB).
	DefaultMaxResponseBytes = 1 << 20
	// DefaultInProgressWait is how long, at most, a duplicate waits for the
	// first request with its key to finish before it is answered 409.
	DefaultInProgressWait = 5 * time.Second
)

// An Option configures Middleware. An option with an impossible setting panics
// when it is made, with the message the package documentation describes.
type Option func(*config)

// config is the middleware's immutable policy after construction.
type config struct {
	methods          []string
	maxKeyLength     int
	ttl              time.Duration
	lockTTL          time.Duration
	maxBodyBytes     int64
	maxResponseBytes int64
	scope            func(*http.Request) (string, error)
	fingerprint      Fingerprint
	storedHeaders    headerSet
	inProgressWait   time.Duration
	onOutcome        func(OutcomeEvent)
	// now is the clock that times the handler's runs and a duplicate's wait,
	// for the 409's Retry-After; tests replace it.
	now func() time.Time
}

// newConfig applies opts for caller (Middleware or NewGuard), which a nil
// option's panic names.
func newConfig(caller string, opts []Option) *config {
	c := &config{
		methods:          []string{http.MethodPost, http.MethodPatch},
		maxKeyLength:     MaxKeyLength,
		ttl:              DefaultTTL,
		lockTTL:          DefaultLockTTL,
		maxBodyBytes:     DefaultMaxBodyBytes,
		maxResponseBytes: DefaultMaxResponseBytes,
		fingerprint:      ExactBody,
		storedHeaders:    headerSet{"Content-Type", "Location", "Etag"},
		inProgressWait:   DefaultInProgressWait,
		now:              time.Now,
	}
	for _, o := range opts {
		if o == nil {
			badArg(caller+"(nil Option)", "an Option")
		}
		o(c)
	}
	return c
}

// needsKey reports whether requests with method are protected.
func (c *config) needsKey(method string) bool {
	for _, m := range c.methods {
		if m == method {
			return true
		}
	}
	return false
}

// WithMethods sets the methods whose requests need an Idempotency-Key and are
// protected (default POST and PATCH). Requests with any other method pass
// straight through to the handler, untouched, even if they carry a key: those
// methods are idempotent by definition (RFC 9110) or not the middleware's
// business. Method names are case-sensitive HTTP tokens.
func WithMethods(methods ...string) Option {
	if len(methods) == 0 {
		badArg("WithMethods()", "at least one method")
	}
	ms := make([]string, 0, len(methods))
	for _, m := range methods {
		if !isToken(m) {
			badArg(fmt.Sprintf("WithMethods(%q)", m), "method names that are HTTP tokens")
		}
		ms = append(ms, m)
	}
	return func(c *config) { c.methods = ms }
}

// WithMaxKeyLength sets the longest key accepted, 1 to MaxKeyLength (255, the
// default) characters; longer keys are answered 400.
func WithMaxKeyLength(n int) Option {
	if n < 1 || n > MaxKeyLength {
		badArg(fmt.Sprintf("WithMaxKeyLength(%d)", n), fmt.Sprintf("1 <= n <= %d", MaxKeyLength))
	}
	return func(c *config) { c.maxKeyLength = n }
}

// WithTTL sets how long a finished record lives (default 24h). After it the
// same key is a new operation.
func WithTTL(d time.Duration) Option {
	if d <= 0 {
		badArg(fmt.Sprintf("WithTTL(%v)", d), "a positive duration")
	}
	return func(c *config) { c.ttl = d }
}

// WithLockTTL sets how long a claim lives without renewal (default 30s): it
// bounds how long the claim of a crashed process blocks its key. Stores that run
// the handler in-process renew it while the handler runs.
func WithLockTTL(d time.Duration) Option {
	if d <= 0 {
		badArg(fmt.Sprintf("WithLockTTL(%v)", d), "a positive duration")
	}
	return func(c *config) { c.lockTTL = d }
}

// WithMaxBodyBytes bounds the request body of a protected request (default
// 1 MiB). A larger body is answered 413: the handler does not run and the store
// is not asked, so nothing is claimed or stored.
func WithMaxBodyBytes(n int64) Option {
	if n < 0 {
		badArg(fmt.Sprintf("WithMaxBodyBytes(%d)", n), "n >= 0")
	}
	return func(c *config) { c.maxBodyBytes = n }
}

// WithMaxResponseBytes bounds the response body that is captured and recorded
// (default 1 MiB). A handler that writes more gets ErrResponseTooLarge from
// Write, and the request is answered 500 (ProblemUnprotectable): a response
// that cannot be recorded is not sent either, because a transactional store
// rolls back what is not recorded, and a client must never be told of a
// success that was undone. As for any 5xx, the key is released. Set the limit
// above the largest response a protected endpoint gives.
func WithMaxResponseBytes(n int64) Option {
	if n < 0 {
		badArg(fmt.Sprintf("WithMaxResponseBytes(%d)", n), "n >= 0")
	}
	return func(c *config) { c.maxResponseBytes = n }
}

// WithScope sets how a request's scope (its principal or tenant) is found; the
// store keys records by (scope, key), so two scopes never see each other's
// records. The default is one empty scope for everyone (a service with one
// client, or whose callers may share records); BearerScope is ready made and
// refuses callers without credentials. scope should return an error only when the request has no acceptable
// principal: the middleware then answers 401 and neither the store nor the
// handler is called.
func WithScope(scope func(*http.Request) (string, error)) Option {
	if scope == nil {
		badArg("WithScope(nil)", "a function")
	}
	return func(c *config) { c.scope = scope }
}

// WithFingerprint sets how a request's content is identified (default
// ExactBody; CanonicalJSON ignores key order and whitespace). A key reused with
// another fingerprint is answered 422.
func WithFingerprint(f Fingerprint) Option {
	if f == nil {
		badArg("WithFingerprint(nil)", "a Fingerprint")
	}
	return func(c *config) { c.fingerprint = f }
}

// WithStoredHeaders adds response headers to the allow-list of headers that
// are recorded and replayed (by default Content-Type, Location and ETag).
// Content-Encoding, and the Vary that goes with it, need no naming: they are
// recorded with the body whatever the list, and a replay sends the recorded
// coding only to a retry that accepts it (docs/CONTRACT.md §3). Set-Cookie, Date, Content-Length, hop-by-hop headers and Idempotent-Replayed
// can never be stored: naming one panics.
func WithStoredHeaders(names ...string) Option {
	add := make([]string, 0, len(names))
	for _, n := range names {
		if !isToken(n) {
			badArg(fmt.Sprintf("WithStoredHeaders(%q)", n), "header names that are HTTP tokens")
		}
		k := http.CanonicalHeaderKey(n)
		if neverStored[k] {
			badArg(fmt.Sprintf("WithStoredHeaders(%q)", n), "a header that may be stored and replayed ("+k+" never is)")
		}
		add = append(add, k)
	}
	return func(c *config) { c.storedHeaders = c.storedHeaders.with(add...) }
}

// neverStored lists the headers that WithStoredHeaders refuses: per-response
// (Date), per-user (Set-Cookie), computed on each send (Content-Length), the
// replay marker itself, and the hop-by-hop headers of RFC 9110 section 7.6.1.
var neverStored = map[string]bool{
	"Set-Cookie":          true,
	"Set-Cookie2":         true,
	"Date":                true,
	"Content-Length":      true,
	"Idempotent-Replayed": true,
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// WithInProgressWait sets how long, at most, a duplicate that arrives while
// the first request with its key still runs waits for it (default
// DefaultInProgressWait, 5s). The store does the waiting (Request.Wait): when
// the first request finishes, the duplicate gets its replay; when it fails
// (5xx, panic) and releases the key, the duplicate runs the handler itself.
// A client that sends Prefer: wait=N (RFC 7240) shortens the wait to N
// seconds, and is told so with Preference-Applied: wait=N. Past the wait, or
// when the client goes away, the answer is 409 with a short Retry-After (see
// docs/server.md in the repository). 0 answers 409 at once.
func WithInProgressWait(max time.Duration) Option {
	if max < 0 {
		badArg(fmt.Sprintf("WithInProgressWait(%v)", max), "a duration >= 0")
	}
	return func(c *config) { c.inProgressWait = max }
}

// WithOnOutcome sets a hook called once per protected request, after its
// response was written, for metrics and logs. It runs on the request's
// goroutine and must not block.
func WithOnOutcome(f func(OutcomeEvent)) Option {
	if f == nil {
		badArg("WithOnOutcome(nil)", "a function")
	}
	return func(c *config) { c.onOutcome = f }
}

// badArg panics with "server: <call>: want <want>", call being the function
// and the value it was given, such as WithTTL(0s): the message of every panic
// for a bad option or argument in this package.
func badArg(call, want string) {
	panic("server: " + call + ": want " + want)
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return true
}

// tchar holds the bytes a token is made of (RFC 9110 section 5.6.2): a table,
// as isToken runs on each element of Accept-Encoding on the replay path.
var tchar = func() (t [256]bool) {
	for c := 0x21; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, rune(c))
	}
	return t
}()
