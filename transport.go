package idem

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/internal/retry"
)

// Transport is an http.RoundTripper that retries what is safe to retry: it
// gives every POST and PATCH an Idempotency-Key (unless switched off), sends the
// same key on every attempt of one operation, and repeats an attempt only when
// the method is idempotent or the request is keyed (see the package
// documentation for the rules).
//
// One call of RoundTrip is one logical operation; all retry state (key,
// backoff, attempt count) belongs to it. A Transport is safe for concurrent use,
// its policy cannot change after NewTransport, and it never modifies the
// caller's request: an attempt that needs a change is sent as a copy, with the
// body rewound by GetBody or replayed from a buffer.
//
// The zero Transport is ready to use: it has the defaults of NewTransport(nil)
// and sends through http.DefaultTransport.
type Transport struct {
	next http.RoundTripper
	cfg  *config // nil: defaultPolicy

	rand func() float64 // uniform in [0, 1); nil: math/rand/v2. A test hook.

	own atomic.Pointer[Budget] // the Transport's own budget, made on first use (see limit.go)
}

var _ http.RoundTripper = (*Transport)(nil)

// defaultPolicy is the policy of a zero Transport.
var defaultPolicy = defaultConfig()

// NewTransport returns a Transport that sends attempts through next
// (http.DefaultTransport if nil), with the defaults changed by opts. It panics
// if an option is nil; options check their own values when they are made.
func NewTransport(next http.RoundTripper, opts ...Option) *Transport {
	cfg := defaultConfig()
	for _, opt := range opts {
		if opt == nil {
			badArg("NewTransport(nil Option)", "an Option")
		}
		opt(&cfg)
	}
	return &Transport{next: next, cfg: &cfg}
}

// policy returns the Transport's configuration.
func (t *Transport) policy() *config {
	if t.cfg == nil {
		return &defaultPolicy
	}
	return t.cfg
}

// limit returns what the Transport's retries are paid from: the Budget
// WithRetryBudget gave (none at all for WithRetryBudget(nil)), or else the
// Transport's own budget.
func (t *Transport) limit(cfg *config) retry.Limit {
	if cfg.budgetSet {
		if cfg.budget == nil {
			return retry.NoLimit
		}
		return budgetLimit{cfg.budget}
	}
	if b := t.own.Load(); b != nil {
		return budgetLimit{b}
	}
	t.own.CompareAndSwap(nil, newTransportBudget())
	return budgetLimit{t.own.Load()}
}

// transport returns the RoundTripper that sends attempts.
func (t *Transport) transport() http.RoundTripper {
	if t.next == nil {
		return http.DefaultTransport
	}
	return t.next
}

// random returns the source of uniform numbers in [0, 1).
func (t *Transport) random() func() float64 {
	if t.rand == nil {
		return rand.Float64
	}
	return t.rand
}

// CloseIdleConnections closes the idle connections of the next RoundTripper, if
// it has such a method. http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.transport().(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip runs one logical operation: it chooses the key, sends the request,
// and retries it as the policy allows. When the operation ends on an HTTP
// response (a success, a status that may not be retried, or a retryable one
// when retries have run out), that response is returned with a nil error and
// its body unread. When it ends on a transport error, or no attempt could be
// made, the error is an *Error.
//
// A request that is not a well-formed http or https request (a nil URL or
// Header, no host, another scheme, an invalid method or header field) is
// passed to the next RoundTripper as it is, once, so that the caller gets its
// error (net/http's, for the default), never a panic and never a retry.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	scan, ok := wellFormed(req)
	if !ok {
		return t.transport().RoundTrip(req)
	}
	if crossOrigin(req) {
		req = withoutKey(req)
		scan.key, scan.keys = "", 0
	}
	cfg := t.policy()
	key, header, generated, err := cfg.resolveKey(req, scan)
	if err != nil {
		closeRequestBody(req)
		e := &Error{Key: key, Cause: err}
		if len(cfg.onDone) > 0 {
			cfg.done(req, Report{Key: key, Err: e, Stop: stopInvalidKey})
		}
		return nil, e
	}
	o := newOperation(t.transport(), cfg, req, key, header, generated)
	o.spare = scan.spare
	resp, err := o.run(t.limit(cfg), t.random())
	o.free()
	return resp, err
}

// headerScan is what one walk over a request's header finds, for RoundTrip
// and every attempt after it.
type headerScan struct {
	key   string // the first Idempotency-Key value, under any spelling of the name
	keys  int    // how many Idempotency-Key values there are
	spare bool   // a value slice has spare capacity (see keyedHeader)
}

// wellFormed reports whether req is an http or https request that idem can
// send and retry: a URL with a host, a valid method, and header fields that
// net/http would send. Anything else fails the same way on every attempt.
// The same walk over the header finds the request's Idempotency-Key values
// (see headerScan), under the canonical name and under any other spelling of
// it (a map entry set directly, such as h["idempotency-key"], is sent as
// well).
func wellFormed(req *http.Request) (headerScan, bool) {
	var scan headerScan
	if req.URL == nil || req.Header == nil || req.URL.Host == "" {
		return scan, false
	}
	switch req.URL.Scheme {
	case "http", "https":
	default:
		return scan, false
	}
	if req.Method != "" && !isToken(req.Method) {
		return scan, false
	}
	for k, vs := range req.Header {
		if !isToken(k) {
			return scan, false
		}
		for _, v := range vs {
			if !validFieldValue(v) {
				return scan, false
			}
		}
		scan.spare = scan.spare || cap(vs) != len(vs)
		if len(k) == len(headerKeyName) && len(vs) > 0 && (k == headerKeyName || strings.EqualFold(k, headerKeyName)) {
			scan.key = vs[0] // the key when it is the only value; more are refused
			scan.keys += len(vs)
		}
	}
	return scan, true
}

// isToken reports whether s is an RFC 9110 token (a method or a field name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}

// tokenChars holds the bytes of an RFC 9110 token: letters, digits and
// !#$%&'*+-.^_`|~. Every header name of every request is checked against
// it, so it is a table rather than a switch.
var tokenChars = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0
	}
	return t
}()

// validFieldValue reports whether v may be sent as a field value: no control
// characters but horizontal tab (net/http's rule).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// crossOrigin reports whether req is a hop of an http.Client redirect to an
// origin (scheme, host and port) other than the first request's. Such a hop
// must not carry the caller's Idempotency-Key, as net/http drops
// Authorization: the key is a credential of the first origin's operation, and
// another server could replay or collide with it.
func crossOrigin(req *http.Request) bool {
	if req.Response == nil || req.Response.Request == nil {
		return false
	}
	first := req.Response.Request
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	return first.URL == nil || !strings.EqualFold(first.URL.Scheme, req.URL.Scheme) ||
		!strings.EqualFold(originHost(first.URL.Scheme, first.URL.Host), originHost(req.URL.Scheme, req.URL.Host))
}

// originHost returns host with the scheme's default port made explicit.
func originHost(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if strings.EqualFold(scheme, "https") {
		return net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

// withoutKey returns a copy of req with no Idempotency-Key: none on its
// header (under any spelling) and none from its context. A POST or PATCH then
// gets a key of its own, generated for this hop, unless auto-keys are off.
func withoutKey(req *http.Request) *http.Request {
	r := req.WithContext(context.WithValue(req.Context(), keyCtxKey{}, noKey{}))
	r.Header = make(http.Header, len(req.Header))
	for k, vs := range req.Header {
		if !strings.EqualFold(k, headerKeyName) {
			r.Header[k] = vs
		}
	}
	return r
}

// noKey in a context's key slot hides a key set further up.
type noKey struct{}

// done calls the WithOnDone functions with r, completed from req.
func (c *config) done(req *http.Request, r Report) {
	r.Method = req.Method
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	r.Host = req.URL.Host
	for _, fn := range c.onDone {
		fn(req.Context(), r)
	}
}
