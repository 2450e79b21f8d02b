package idem

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// RetryEvent describes a retry about to be made; WithOnRetry receives it.
type RetryEvent struct {
	// Attempt is the number of the attempt that failed (1 for the first).
	Attempt int
	// Key is the operation's idempotency key ("" if it has none).
	Key string
	// Method and URL are the request's (the URL without its password).
	Method, URL string
	// StatusCode is the failed attempt's status, or 0 if it ended in Err.
	StatusCode int
	// Err is the failed attempt's transport error, or nil if it got a response.
	Err error
	// Delay is the wait chosen before the next attempt.
	Delay time.Duration
	// RetryAfter is the wait the server asked for with Retry-After, or 0.
	RetryAfter time.Duration
	// Reason says why the attempt is retried.
	Reason Reason
}

// maxSpread bounds the random spread added to a wait the server named.
const maxSpread = time.Second

// operation is the state of one logical operation: one call of RoundTrip.
type operation struct {
	t   *Transport
	req *http.Request // the caller's, never modified
	ctx context.Context

	key    string      // "" when unkeyed
	header string      // Idempotency-Key value to add, "" to send req's headers
	hdr    http.Header // req.Header plus the key, built on first use

	body    replayBody
	getBody func() (io.ReadCloser, error) // for copies of a buffered body

	idempotent bool // the method is idempotent
	start      time.Time
	capAt      time.Time // start + WithMaxElapsed
	deadline   time.Time // the earlier of capAt and the context's deadline
	bo         backoff.BackOff

	attempts   int
	lastStatus int
}

// run carries out the operation of RoundTrip.
func (t *Transport) run(req *http.Request, key, header string) (*http.Response, error) {
	o := operation{
		t:          t,
		req:        req,
		ctx:        req.Context(),
		key:        key,
		header:     header,
		idempotent: idempotentMethod(req.Method),
	}
	keyed := key != ""
	mayRetry := t.cfg.maxAttempts > 1 && (o.idempotent || keyed || t.cfg.retryUnsent)

	var err error
	if o.body, err = newReplayBody(req, t.cfg.bodyLimit, mayRetry); err != nil {
		return nil, &Error{Key: key, LastErr: err, detail: "reading the request body"}
	}

	o.start = t.now()
	o.capAt = o.start.Add(t.cfg.maxElapsed)
	o.deadline = o.capAt
	if d, ok := o.ctx.Deadline(); ok && d.Before(o.deadline) {
		o.deadline = d
	}
	budget := t.cfg.budget
	budget.recordRequest(o.start)

	// A host held back by the budget is waited for, even before a first attempt.
	if budget != nil {
		if cause, detail := o.waitForHost(); cause != nil {
			o.closeBody()
			return nil, o.fail(nil, cause, detail)
		}
	}

	var nextBody io.ReadCloser // the body of the next attempt (bodyGetBody)
	for {
		o.attempts++
		bound, capped := o.attemptBound()
		areq, a := o.attemptRequest(nextBody, bound > 0)
		resp, timedOut, err := t.send(areq, a, bound, capped)
		var retryAfter time.Duration
		hasRetryAfter := false
		if resp != nil {
			o.lastStatus = resp.StatusCode
			if honoursRetryAfter(resp.StatusCode) {
				retryAfter, hasRetryAfter = o.retryAfter(resp)
			}
		}

		// What happened, and may it be repeated?
		var reason Reason
		switch {
		case err == nil:
			if o.idempotent || keyed {
				reason = statusReason(resp.StatusCode, keyed)
			}
		case o.ctx.Err() != nil:
			return nil, o.fail(err, context.Cause(o.ctx), "")
		case timedOut:
			if o.idempotent || keyed {
				reason = ReasonAttemptTimeout
			}
		default:
			switch classifyError(err) {
			case errTransient:
				if o.idempotent || keyed {
					reason = ReasonTransportError
				}
			case errUnsent:
				if o.idempotent || keyed || t.cfg.retryUnsent {
					reason = ReasonTransportError
				}
			}
		}
		if reason == 0 {
			return o.finish(resp, err, nil, "")
		}

		// A retry is wanted: is one allowed?
		if o.attempts >= t.cfg.maxAttempts {
			return o.finish(resp, err, ErrExhausted, "all attempts used")
		}
		if !o.body.replayable() {
			return o.finish(resp, err, ErrBodyNotReplayable, "")
		}
		if hasRetryAfter && retryAfter > t.cfg.maxRetryAfter {
			return o.finish(resp, err, ErrExhausted, "Retry-After "+retryAfter.String()+" exceeds the maximum")
		}
		now := t.now()
		wait := o.nextWait(now, retryAfter)
		if !now.Add(wait).Before(o.deadline) {
			return o.finish(resp, err, ErrExhausted, "the next wait of "+wait.String()+" would end past the deadline")
		}
		if !budget.tryRetry(now) {
			return o.finish(resp, err, ErrBudgetExhausted, "")
		}
		takenAt := now
		if o.body.kind == bodyGetBody {
			b, gerr := req.GetBody()
			if gerr != nil {
				budget.refund(takenAt)
				return o.finish(resp, err, &wrapError{sentinel: ErrBodyNotReplayable, err: gerr}, "")
			}
			nextBody = b
		}
		o.notify(resp, err, wait, retryAfter, reason)
		discard(resp)
		serr := t.sleep(o.ctx, wait)
		detail := ""
		if serr == nil && budget != nil {
			// Another operation may have put a hold on the host meanwhile.
			serr, detail = o.waitForHost()
		}
		if serr != nil {
			budget.refund(takenAt)
			if nextBody != nil {
				_ = nextBody.Close()
			}
			return nil, o.fail(err, serr, detail)
		}
	}
}

// attemptRequest returns the request of the next attempt: the caller's own
// for a first attempt that needs no change, otherwise a copy with the key
// header, a fresh body and, when the Transport bounds the attempt (bound), a
// context the bound can cancel. The copy lives in the returned attempt, nil
// when the caller's request is sent.
func (o *operation) attemptRequest(nextBody io.ReadCloser, bound bool) (*http.Request, *attempt) {
	req := o.req
	first := o.attempts == 1
	if !bound && first && o.header == "" && (o.body.kind == bodyNone || o.body.kind == bodyGetBody ||
		o.body.kind == bodyOnce && o.body.once == req.Body) {
		return req, nil // the hot path: nothing to change
	}
	a := new(attempt)
	if bound {
		// WithContext is inlined and its copy does not escape: the request is
		// copied straight into a, with a's context.
		a.req = *req.WithContext(a.bind(o.ctx))
	} else {
		a.req = *req // a shallow copy, with the caller's context
	}
	r := &a.req
	if o.header != "" {
		r.Header = o.headerWithKey(a)
	}
	switch o.body.kind {
	case bodyGetBody:
		if !first {
			r.Body = nextBody
		}
	case bodyBuffered:
		if len(o.body.buf) == 0 {
			r.Body, r.GetBody, r.ContentLength = http.NoBody, nil, 0
			break
		}
		if o.getBody == nil {
			buf := o.body.buf
			o.getBody = func() (io.ReadCloser, error) { return bufferedBody(buf), nil }
		}
		r.Body = bufferedBody(o.body.buf)
		r.GetBody = o.getBody
		r.ContentLength = int64(len(o.body.buf))
	case bodyOnce:
		r.Body = o.body.once
	}
	return r, a
}

// headerWithKey returns a copy of the caller's header with the key added; the
// copy is shared by the operation's attempts, which must not modify it. The
// map is the only new thing: the other headers' values are the caller's own
// slices (capped, so an append cannot write into them), and the key's value
// is backed by a, the first attempt that sends it.
func (o *operation) headerWithKey(a *attempt) http.Header {
	if o.hdr != nil {
		return o.hdr
	}
	src := o.req.Header
	h := make(http.Header, len(src)+1)
	for k, vs := range src {
		h[k] = vs[:len(vs):len(vs)]
	}
	a.keyVal[0] = o.header
	h[HeaderIdempotencyKey] = a.keyVal[:]
	o.hdr = h
	return h
}

// attemptBound returns how long the next attempt may wait for its response
// headers (0: no bound), and whether the bound is the WithMaxElapsed cap. Every
// attempt, the first included, is bounded by WithAttemptTimeout and by the time
// left under the cap, so an operation ends within WithMaxElapsed even when its
// first attempt hangs. When the caller's context ends before the cap, the
// context bounds the first attempt and no timer of ours is needed (the hot
// path for callers with deadlines).
func (o *operation) attemptBound() (time.Duration, bool) {
	at := o.t.cfg.attemptTimeout
	if o.attempts == 1 && o.deadline.Before(o.capAt) && (at <= 0 || o.deadline.Sub(o.start) <= at) {
		return 0, false // the context's own deadline comes first
	}
	left := o.capAt.Sub(o.t.now())
	if left <= 0 {
		left = 1 // the cap has passed: give up on this attempt at once
	}
	if at > 0 && at <= left {
		return at, false
	}
	return left, true
}

// retryAfter parses the Retry-After of a 409, 429 or 503. On a 429 or 503 it
// also holds the host back, for every operation sharing the budget, for the
// time the server names (at most WithMaxRetryAfter).
func (o *operation) retryAfter(resp *http.Response) (time.Duration, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	now := o.t.now()
	d, ok := ParseRetryAfter(v, now)
	if ok && d > 0 && holdsHost(resp.StatusCode) {
		o.t.cfg.budget.holdHost(o.req.URL.Host, now.Add(min(d, o.t.cfg.maxRetryAfter)))
	}
	return d, ok
}

// nextWait returns the wait before the next attempt: the backoff, raised to the
// server's Retry-After (plus a small random spread) and to the time the host is
// held back by the budget.
func (o *operation) nextWait(now time.Time, retryAfter time.Duration) time.Duration {
	t := o.t
	if o.bo == nil {
		o.bo = NewBackOff(t.cfg.jitter, t.cfg.base, t.cfg.max, t.rand)
	}
	wait := o.bo.NextBackOff()
	if retryAfter > 0 {
		wait = max(wait, retryAfter+o.spread(retryAfter))
	}
	if until := t.cfg.budget.heldUntil(o.req.URL.Host, now); !until.IsZero() {
		if h := until.Sub(now); h > wait {
			wait = h + o.spread(h)
		}
	}
	return wait
}

// spread returns a random U[0, min(1s, d/10)), added to a wait the server
// named so that clients told the same thing do not return in lock-step.
func (o *operation) spread(d time.Duration) time.Duration {
	s := min(maxSpread, d/10)
	if s <= 0 {
		return 0
	}
	r := o.t.rand()
	if !(r > 0) {
		return 0
	}
	x := time.Duration(r * float64(s))
	return min(x, s-1)
}

// waitForHost waits, before an attempt, until the host is no longer held back
// by the budget. It returns ErrHostCoolingDown, without waiting, when the hold
// (plus its spread) would end past the deadline, or the context's cause if it
// is done during the wait.
func (o *operation) waitForHost() (cause error, detail string) {
	now := o.t.now()
	until := o.t.cfg.budget.heldUntil(o.req.URL.Host, now)
	if until.IsZero() {
		return nil, ""
	}
	h := until.Sub(now)
	wait := h + o.spread(h)
	if !now.Add(wait).Before(o.deadline) {
		return ErrHostCoolingDown, "held for " + h.String()
	}
	if err := o.t.sleep(o.ctx, wait); err != nil {
		return err, ""
	}
	return nil, ""
}

// finish ends the operation on its last outcome: the response if there is
// one, else an *Error with the given cause.
func (o *operation) finish(resp *http.Response, err, cause error, detail string) (*http.Response, error) {
	if resp != nil {
		return resp, nil
	}
	return nil, o.fail(err, cause, detail)
}

// fail returns the operation's *Error, and logs it when WithLogger is set.
func (o *operation) fail(lastErr, cause error, detail string) *Error {
	e := &Error{
		Attempts:   o.attempts,
		Key:        o.key,
		LastErr:    lastErr,
		LastStatus: o.lastStatus,
		Cause:      cause,
		detail:     detail,
	}
	if l := o.t.cfg.logger; l != nil {
		l.LogAttrs(o.ctx, slog.LevelWarn, "idem: giving up",
			slog.String("method", o.req.Method),
			slog.String("url", o.req.URL.Redacted()),
			slog.String("key", o.key),
			slog.Int("attempts", o.attempts),
			slog.String("error", e.Error()))
	}
	return e
}

// notify reports a retry to WithOnRetry and WithLogger.
func (o *operation) notify(resp *http.Response, err error, wait, retryAfter time.Duration, reason Reason) {
	cfg := &o.t.cfg
	if cfg.onRetry == nil && cfg.logger == nil {
		return
	}
	ev := RetryEvent{
		Attempt:    o.attempts,
		Key:        o.key,
		Method:     o.req.Method,
		URL:        o.req.URL.Redacted(),
		Err:        err,
		Delay:      wait,
		RetryAfter: retryAfter,
		Reason:     reason,
	}
	if ev.Method == "" {
		ev.Method = http.MethodGet
	}
	if resp != nil {
		ev.StatusCode = resp.StatusCode
	}
	if cfg.onRetry != nil {
		cfg.onRetry(ev)
	}
	if cfg.logger != nil {
		attrs := []slog.Attr{
			slog.Int("attempt", ev.Attempt),
			slog.String("method", ev.Method),
			slog.String("url", ev.URL),
			slog.String("key", ev.Key),
			slog.String("reason", reason.String()),
			slog.Duration("delay", wait),
		}
		if ev.StatusCode != 0 {
			attrs = append(attrs, slog.Int("status", ev.StatusCode))
		}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		cfg.logger.LogAttrs(o.ctx, slog.LevelInfo, "idem: retrying", attrs...)
	}
}

// closeBody closes the caller's body when no attempt will send it.
func (o *operation) closeBody() {
	switch o.body.kind {
	case bodyGetBody:
		closeRequestBody(o.req)
	case bodyOnce:
		_ = o.body.once.Close()
	}
}
