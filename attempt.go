package idem

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// drainLimit is how much of a discarded response body is read so that its
// connection can be reused; a longer body is closed unread (the connection is
// then closed too, which costs less than reading it).
const drainLimit = 64 << 10

// attemptResult is what one attempt came to.
type attemptResult struct {
	outcome
	resp          *http.Response
	retryAfter    time.Duration // the Retry-After of a 409, 429 or 503
	hasRetryAfter bool
	refusal       refusal // why the operation ended on it, when it did
	superseded    bool    // a late attempt answered while this one was made (see late.go)
}

// attempt makes the next attempt and returns its result. nextBody is the body
// of an attempt after the first, from GetBody.
func (o *operation) attempt(nextBody io.ReadCloser) attemptResult {
	o.attempts++
	now := time.Now()
	bound, capped := o.attemptBound(now)
	limit := o.deadline.Sub(now) // how long the attempt may wait for its answer
	if bound > 0 {
		limit = min(limit, bound)
	}
	if bound <= 0 {
		resp, err := o.t.transport().RoundTrip(o.attemptRequest(o.ctx, nextBody, limit))
		return o.result(now, resp, err)
	}
	// The bound is for the response headers only.
	ctx, cancel := context.WithCancelCause(o.ctx)
	b := &boundedAttempt{cancel: cancel, after: bound, capped: capped}
	req := o.attemptRequest(ctx, nextBody, limit)
	if o.late != nil && !capped {
		// A keyed attempt goes on past WithAttemptTimeout (see late.go).
		return o.attemptGoesOn(req, b, now)
	}
	// A timer cancels the attempt's context if the headers are late, and is
	// stopped when they come.
	timer := time.AfterFunc(bound, b.expire)
	resp, err := o.t.transport().RoundTrip(req)
	if !timer.Stop() {
		// The bound fired: whatever came back may be cut.
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return attemptResult{outcome: outcome{err: context.Cause(ctx), timedOut: o.ctx.Err() == nil}}
	}
	return o.answered(now, b, resp, err)
}

// answered is the result of a bounded attempt whose answer came within its
// bound: the body of a response keeps the attempt's context until it is
// closed; otherwise the context is released now.
func (o *operation) answered(start time.Time, b *boundedAttempt, resp *http.Response, err error) attemptResult {
	if err != nil || resp.Body == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		b.cancel(nil)
	} else {
		b.ReadCloser = resp.Body
		resp.Body = b
	}
	return o.result(start, resp, err)
}

// result reads what the operation needs from a response: its status, and the
// Retry-After of a 409, 429 or 503 (which, on a 429 or 503, holds the host
// back for every operation sharing the budget, for at most WithMaxRetryAfter).
func (o *operation) result(now time.Time, resp *http.Response, err error) attemptResult {
	if err != nil {
		return attemptResult{outcome: outcome{err: err}}
	}
	r := attemptResult{outcome: outcome{status: resp.StatusCode}, resp: resp}
	o.lastStatus = resp.StatusCode
	if !honoursRetryAfter(resp.StatusCode) {
		return r
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		r.retryAfter, r.hasRetryAfter = parseRetryAfter(v, now)
		if r.hasRetryAfter && r.retryAfter > 0 && holdsHost(resp.StatusCode) {
			o.cfg.budget.holdHost(o.req.URL.Host, now.Add(min(r.retryAfter, o.cfg.maxRetryAfter)))
		}
	}
	return r
}

// attemptBound returns how long the next attempt may wait for its response
// headers (0: no bound of ours), and whether the bound is the WithMaxElapsed
// cap. Every attempt, the first included, is bounded by WithAttemptTimeout
// and by the time left under the cap, so an operation ends within
// WithMaxElapsed even when its first attempt hangs. When the caller's context
// ends before the cap and before the attempt time-out, the context bounds the
// first attempt and needs no help.
//
// An attempt after a keyed 409 is a poll of a server known to be working on
// the answer: it may wait pollTimeout (5s) even when WithAttemptTimeout is
// shorter, and says so with Prefer: wait, so that the server holds it until
// the first request's answer exists instead of answering 409 again, and the
// caller learns the outcome the moment it is known. WithAttemptTimeout is
// for the attempts that may be lost; a poll is answered.
func (o *operation) attemptBound(now time.Time) (time.Duration, bool) {
	at := o.cfg.attemptTimeout
	if o.polling && at > 0 {
		at = max(at, pollTimeout)
	}
	if o.attempts == 1 && o.deadline.Before(o.capAt) && (at <= 0 || o.deadline.Sub(o.start) <= at) {
		return 0, false
	}
	left := max(o.capAt.Sub(now), 1)
	if at > 0 && at <= left {
		return at, false
	}
	return left, true
}

// attemptRequest returns the request of the next attempt: a shallow copy of
// the caller's with the attempt's context (carrying its AttemptInfo), the key
// and Prefer headers and the attempt's body. limit
// is how long the attempt may wait for its answer.
func (o *operation) attemptRequest(ctx context.Context, nextBody io.ReadCloser, limit time.Duration) *http.Request {
	first := o.attempts == 1
	keyed := o.key != ""
	actx := &attemptContext{Context: ctx, info: AttemptInfo{
		Number: o.attempts,
		Reason: o.nextReason,
		Wait:   o.waited,
		Poll:   o.polling,
		Key:    o.key,
		Status: o.last.status,
		Err:    o.last.err,

		RetryAfter: o.last.retryAfter,
	}}
	r := o.req.WithContext(actx)
	if keyed {
		r.Header = o.keyedHeader(limit)
	}
	o.body.set(r, first, nextBody)
	return r
}

// keyedHeader returns a copy of the caller's header for a keyed attempt: with
// the key when the Transport adds it, and with Prefer: wait=N (RFC 7240),
// N the whole seconds the attempt can wait for its answer, less a margin for
// the answer to come back (see preferWait), so that a server that makes a
// duplicate wait for the first request answers 409 before this attempt is
// cut. The first attempt under a key generated for this operation sends no
// Prefer: no server can have that key in progress. A caller's own Prefer wait
// is kept as it is. The values are the caller's own slices, capped so that an
// append cannot write into them.
func (o *operation) keyedHeader(limit time.Duration) http.Header {
	src := o.req.Header
	h := make(http.Header, len(src)+2)
	for k, vs := range src {
		h[k] = vs[:len(vs):len(vs)]
	}
	vals := make([]string, 0, 2) // backs the key's and Prefer's new values
	if o.header != "" {
		vals = append(vals, o.header)
		h[HeaderIdempotencyKey] = vals[0:1:1]
	}
	if !(o.newKey && o.attempts == 1) && !prefersWait(src) {
		vals = append(vals, "wait="+strconv.FormatInt(int64(preferWait(limit)/time.Second), 10))
		if p := h["Prefer"]; len(p) > 0 {
			h["Prefer"] = append(p, vals[len(vals)-1])
		} else {
			h["Prefer"] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	return h
}

// preferWait returns how long a server may hold an attempt that can wait
// limit for its answer: limit less a tenth (at least 100ms) for the answer to
// travel back, rounded down to whole seconds. Less than a second gives 0: the
// server answers at once rather than wait past the attempt's time-out (no
// Prefer would let it wait its own default).
func preferWait(limit time.Duration) time.Duration {
	d := limit - max(limit/10, 100*time.Millisecond)
	if d < time.Second {
		return 0
	}
	return d.Truncate(time.Second)
}

// prefersWait reports whether h already holds a Prefer wait preference.
func prefersWait(h http.Header) bool {
	for _, v := range h["Prefer"] {
		for _, p := range strings.Split(v, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(p), "="); strings.EqualFold(strings.TrimSpace(name), "wait") {
				return true
			}
		}
	}
	return false
}

// boundedAttempt is what bounding an attempt's wait for its headers needs:
// the cancel function of the attempt's context, which the timer calls with an
// *attemptTimeoutError when the bound fires; and, once the headers came, the
// response body, whose Close releases the context.
type boundedAttempt struct {
	cancel context.CancelCauseFunc
	after  time.Duration
	capped bool
	io.ReadCloser
}

func (b *boundedAttempt) expire() {
	b.cancel(&attemptTimeoutError{after: b.after, capped: b.capped})
}

func (b *boundedAttempt) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// attemptTimeoutError is the error of an attempt cut by WithAttemptTimeout or
// by the WithMaxElapsed cap. It is a net.Error with Timeout() true. An attempt
// time-out matches context.DeadlineExceeded, as an http.Client time-out does;
// a cut by the cap does not: the caller's context is fine, and the *Error
// says the cap ended the operation.
type attemptTimeoutError struct {
	after  time.Duration
	capped bool // cut by the WithMaxElapsed cap
}

func (e *attemptTimeoutError) Error() string {
	if e.capped {
		return "idem: attempt cut after " + e.after.String() + " by the operation's WithMaxElapsed cap"
	}
	return "idem: attempt timed out after " + e.after.String()
}

func (e *attemptTimeoutError) Timeout() bool   { return true }
func (e *attemptTimeoutError) Temporary() bool { return true }
func (e *attemptTimeoutError) Is(target error) bool {
	return target == context.DeadlineExceeded && !e.capped
}

// discard drains up to drainLimit bytes of resp's body and closes it, so that
// the connection goes back to the pool. A non-zero until bounds the time the
// drain may take: a body that stalls is closed then (which ends the read).
func discard(resp *http.Response, until time.Time) {
	if resp == nil || resp.Body == nil {
		return
	}
	if !until.IsZero() {
		d := time.Until(until)
		if d <= 0 {
			_ = resp.Body.Close()
			return
		}
		stop := time.AfterFunc(d, func() { _ = resp.Body.Close() })
		defer stop.Stop()
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

// closeRequestBody closes req's body, as a RoundTripper must even when it
// sends nothing.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
