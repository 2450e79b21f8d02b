package idem

import (
	"context"
	"io"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/internal/httpfield"
	"github.com/idemkit/idem/internal/retry"
)

// drainLimit is how much of a discarded response body is read so that its
// connection can be reused; a longer body is closed unread (the connection is
// then closed too, which costs less than reading it).
const drainLimit = 64 << 10

// attemptResult is what one attempt came to.
type attemptResult struct {
	outcome
	resp       *http.Response
	superseded bool // a late attempt answered while this one was made (see late.go)
}

// keyedHeader returns a copy of the caller's header for a keyed attempt: with
// the key when the Transport adds it, and with Prefer: wait=N (RFC 7240),
// N the whole seconds the attempt can wait for its answer, less a margin for
// the answer to come back (see preferWait), so that a server that makes a
// duplicate wait for the first request answers 409 before this attempt is
// cut. The first attempt under a key generated for this operation sends no
// Prefer: no server can have that key in progress. A caller's own Prefer wait
// is kept as it is.
//
// keyValue is the header value to add ("" to send the caller's), and prefer says
// whether to send Prefer: wait (every attempt but the first under a generated
// key). The copy holds the caller's own value slices; spare says that one of
// them has spare capacity (headerScan), and those are then capped, so that an
// append to the copy (a RoundTripper's Header.Add) cannot write into the
// caller's array. The new values are stored in vals.
func keyedHeader(src http.Header, keyValue string, prefer bool, limit time.Duration, spare bool, vals *[2]string) http.Header {
	// maps.Clone copies a small map's table as it is, where inserting every
	// entry into a new map hashes each name again (BenchmarkKeyedHeader).
	h := maps.Clone(src)
	if spare {
		for k, vs := range h {
			if cap(vs) != len(vs) {
				h[k] = vs[:len(vs):len(vs)]
			}
		}
	}
	if keyValue != "" {
		vals[0] = keyValue
		h[headerKeyName] = vals[0:1:1]
	}
	if prefer && !prefersWait(src) {
		vals[1] = preferValue(preferWait(limit))
		if p := h["Prefer"]; len(p) > 0 {
			h["Prefer"] = append(p, vals[1])
		} else {
			h["Prefer"] = vals[1:2:2]
		}
	}
	return h
}

// preferValues holds the Prefer values of waits under a minute, which
// preferValue hands out rather than build one per attempt.
var preferValues = func() (v [60]string) {
	for i := range v {
		v[i] = "wait=" + strconv.Itoa(i)
	}
	return v
}()

// preferValue returns the Prefer value of a wait of d, in whole seconds.
func preferValue(d time.Duration) string {
	s := int64(d / time.Second)
	if s >= 0 && s < int64(len(preferValues)) {
		return preferValues[s]
	}
	return "wait=" + strconv.FormatInt(s, 10)
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

// prefersWait reports whether h already holds a Prefer wait preference
// (valid or not: the caller's own is sent as it is).
func prefersWait(h http.Header) bool {
	_, found, _ := httpfield.PreferWait(h["Prefer"], time.Hour)
	return found
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
		return "idem: attempt cut after " + e.after.String() + " by the WithMaxElapsed cap"
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
		cut := time.AfterFunc(d, func() { _ = resp.Body.Close() })
		defer cut.Stop()
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

// Attempt makes the attempt a and returns its outcome, judged by WithRetryIf;
// superseded when a late attempt answered meanwhile (see retry.Driver).
func (o *operation) Attempt(a retry.Attempt) (retry.Outcome, bool) {
	o.attempts = a.Number
	res := o.attempt(a)
	if res.superseded {
		return retry.Outcome{}, true // an earlier attempt answered (see late.go)
	}
	o.resp = res.resp
	return o.judged(res.outcome, a.Fresh).engine(), false
}

// attempt makes the attempt a and returns its result.
func (o *operation) attempt(a retry.Attempt) attemptResult {
	nextBody := o.nextBody
	o.nextBody = nil
	if a.Bound <= 0 {
		resp, err := o.next.RoundTrip(&o.attemptRequest(o.ctx, a, nextBody).req)
		return readResponse(a.Start, resp, err)
	}
	// The bound is for the response headers only.
	ctx, cancel := context.WithCancelCause(o.ctx)
	p := o.attemptRequest(ctx, a, nextBody)
	req, b := &p.req, &p.bound
	*b = boundedAttempt{cancel: cancel, after: a.Bound, capped: a.Capped}
	if o.late != nil && !a.Capped {
		// A keyed attempt goes on past WithAttemptTimeout (see late.go).
		return o.attemptGoesOn(req, b, a.Start)
	}
	// A timer cancels the attempt's context if the headers are late, and is
	// stopped when they come.
	timer := time.AfterFunc(a.Bound, b.expire)
	resp, err := o.next.RoundTrip(req)
	if !timer.Stop() {
		// The bound fired: whatever came back may be cut.
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return attemptResult{outcome: outcome{err: context.Cause(ctx), timedOut: o.ctx.Err() == nil}}
	}
	return o.headersCame(a.Start, b, resp, err)
}

// headersCame is the result of a bounded attempt whose answer came within its
// bound: the body of a response keeps the attempt's context until it is
// closed; otherwise the context is released now.
func (o *operation) headersCame(start time.Time, b *boundedAttempt, resp *http.Response, err error) attemptResult {
	if err != nil || resp.Body == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		b.cancel(nil)
	} else {
		b.ReadCloser = resp.Body
		resp.Body = b
	}
	return readResponse(start, resp, err)
}

// readResponse reads what the operation needs from a response: its status,
// and the Retry-After of a 409, 429 or 503 (which, on a 429 or 503, the
// engine makes hold the host back for every operation sharing the budget).
func readResponse(now time.Time, resp *http.Response, err error) attemptResult {
	if err != nil {
		return attemptResult{outcome: outcome{err: err}}
	}
	r := attemptResult{outcome: outcome{status: resp.StatusCode}, resp: resp}
	if !honoursRetryAfter(resp.StatusCode) {
		return r
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		r.retryAfter, r.hasRetryAfter = parseRetryAfter(v, now)
	}
	return r
}

// attemptRequest returns the request of the attempt a (p.req): a shallow
// copy of the caller's with the attempt's context (carrying its
// AttemptInfo), the key and Prefer headers and the attempt's body.
func (o *operation) attemptRequest(ctx context.Context, a retry.Attempt, nextBody io.ReadCloser) *attemptParts {
	p := new(attemptParts)
	p.ctx = attemptContext{Context: ctx, info: o.attemptInfo(a)}
	// WithContext is inlined, and its copy of the request does not escape:
	// the attempt's request is the one in p.
	p.req = *o.req.WithContext(&p.ctx)
	r := &p.req
	if o.key != "" {
		r.Header = keyedHeader(o.req.Header, o.header, !a.Fresh, a.Limit, o.spare, &p.vals)
	}
	o.body.set(r, a.Number == 1, nextBody)
	return p
}

// attemptParts is what an attempt's request is made of, in one allocation
// rather than four: the request, its context, the values of the key and
// Prefer headers it adds, and, for a bounded attempt, what bounds it. They
// live as long as the request does.
type attemptParts struct {
	req   http.Request
	ctx   attemptContext
	vals  [2]string
	bound boundedAttempt
}

// attemptGoesOn makes a keyed attempt bounded by WithAttemptTimeout (b.after):
// the round trip runs in a goroutine, and when the bound passes first, the
// attempt is handed to o.late to go on, and counts as timed out. When another
// late attempt answers meanwhile, this one is handed over too, and the result
// says so.
func (o *operation) attemptGoesOn(req *http.Request, b *boundedAttempt, start time.Time) attemptResult {
	done := make(chan roundTrip, 1)
	rt := o.next
	go func() {
		resp, err := rt.RoundTrip(req)
		done <- roundTrip{resp, err}
	}()
	timer := time.NewTimer(b.after)
	defer timer.Stop()
	select {
	case r := <-done:
		return o.headersCame(start, b, r.resp, r.err)
	case <-timer.C:
		o.late.goOn(done, b)
		return attemptResult{outcome: outcome{err: &attemptTimeoutError{after: b.after}, timedOut: true}}
	case <-o.late.won:
		o.late.goOn(done, b)
		return attemptResult{superseded: true}
	}
}
