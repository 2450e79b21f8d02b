package idem

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
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
// caller's request: each attempt after the first is sent as a copy, with the
// body rewound by GetBody or replayed from a buffer.
type Transport struct {
	next http.RoundTripper
	cfg  config

	// Test hooks; set by NewTransport, never changed afterwards.
	now   func() time.Time
	rand  func() float64                                   // uniform in [0, 1)
	sleep func(ctx context.Context, d time.Duration) error // waits d or until ctx is done
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that sends attempts through next
// (http.DefaultTransport if nil), with the defaults changed by opts. It panics
// if an option is nil.
func NewTransport(next http.RoundTripper, opts ...Option) *Transport {
	if next == nil {
		next = http.DefaultTransport
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		if opt == nil {
			panic("idem: NewTransport: nil Option")
		}
		opt(&cfg)
	}
	return &Transport{
		next:  next,
		cfg:   cfg,
		now:   time.Now,
		rand:  rand.Float64,
		sleep: sleepContext,
	}
}

// CloseIdleConnections closes the idle connections of the next RoundTripper, if
// it has such a method. http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.next.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip runs one logical operation: it chooses the key, sends the request,
// and retries it as the policy allows. When the operation ends on an HTTP
// response (a success, a status that may not be retried, or a retryable one
// when retries have run out), that response is returned with a nil error and
// its body unread. When it ends on a transport error, or no attempt could be
// made, the error is an *Error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, header, err := t.resolveKey(req)
	if err != nil {
		closeRequestBody(req)
		return nil, &Error{Cause: err}
	}
	return t.run(req, key, header)
}

// resolveKey returns the operation's key and, when it must be added, the header
// value to send. A key on the request's header is used as it is; otherwise the
// context's key, otherwise a generated one for POST and PATCH.
func (t *Transport) resolveKey(req *http.Request) (key, header string, err error) {
	if vs, ok := req.Header[HeaderIdempotencyKey]; ok {
		if len(vs) != 1 {
			return "", "", &keyError{source: "header", reason: strconv.Itoa(len(vs)) + " values"}
		}
		key, err = parseKey(vs[0])
		return key, "", err
	}
	if k, ok := keyFromContext(req.Context()); ok {
		if reason := checkOutgoingKey(k, t.cfg.keyFormat); reason != "" {
			return "", "", &keyError{source: "context", reason: reason}
		}
		return k, formatKey(k, t.cfg.keyFormat), nil
	}
	if t.cfg.autoKeys && autoKeyMethod(req.Method) {
		k := t.cfg.keyGen()
		if reason := checkOutgoingKey(k, t.cfg.keyFormat); reason != "" {
			return "", "", &keyError{source: "generator", reason: reason}
		}
		return k, formatKey(k, t.cfg.keyFormat), nil
	}
	return "", "", nil
}

// send makes one attempt with req. A bound > 0 limits the wait for the
// response headers (capped says it comes from the WithMaxElapsed cap); it does
// not apply to reading the body. A bound needs the attempt a that holds req,
// bound to a cancellable context. timedOut reports that the bound fired, in
// which case the response, if any, has been closed and err is an
// *attemptTimeoutError.
func (t *Transport) send(req *http.Request, a *attempt, bound time.Duration, capped bool) (resp *http.Response, timedOut bool, err error) {
	if bound <= 0 {
		resp, err = t.next.RoundTrip(req)
		return resp, false, err
	}
	e := expirers.Get().(*expirer)
	e.a = a
	timer := time.AfterFunc(bound, e.fn)
	resp, err = t.next.RoundTrip(req)
	if !timer.Stop() {
		// The bound fired (e is the timer's now): the body may be cut,
		// whatever came back.
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		a.release()
		return nil, true, &attemptTimeoutError{after: bound, capped: capped}
	}
	e.a = nil
	expirers.Put(e)
	if err != nil {
		a.release()
		return nil, false, err
	}
	if resp.Body != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		// The body must outlive the bound: release the attempt's context
		// only when the caller (or discard) closes it.
		a.body = resp.Body
		resp.Body = (*attemptBody)(a)
	}
	return resp, false, nil
}

// attemptTimeoutError is the error of an attempt cut by WithAttemptTimeout or
// by the WithMaxElapsed cap. It is a net.Error with Timeout() true and matches
// context.DeadlineExceeded.
type attemptTimeoutError struct {
	after  time.Duration
	capped bool // cut by the WithMaxElapsed cap
}

func (e *attemptTimeoutError) Error() string {
	if e.capped {
		return "idem: attempt cut after " + e.after.String() + " by the operation's time cap"
	}
	return "idem: attempt timed out after " + e.after.String()
}

func (e *attemptTimeoutError) Timeout() bool   { return true }
func (e *attemptTimeoutError) Temporary() bool { return true }
func (e *attemptTimeoutError) Is(target error) bool {
	return target == context.DeadlineExceeded
}

// sleepContext waits for d, or until ctx is done, and then returns
// context.Cause(ctx).
func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
		return nil
	}
}
