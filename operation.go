package idem

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/internal/jitter"
)

// operation is the state of one logical operation: one call of RoundTrip.
type operation struct {
	next http.RoundTripper // sends the attempts
	rnd  func() float64    // uniform in [0, 1)
	cfg  *config
	req  *http.Request // the caller's, never modified
	ctx  context.Context

	key    string // "" when unkeyed
	header string // Idempotency-Key value to add, "" to send req's headers
	newKey bool   // key was generated for this operation: no server can have it in progress yet
	body   replayBody

	start    time.Time
	capAt    time.Time      // start + WithMaxElapsed
	deadline time.Time      // the earlier of capAt and the context's deadline
	bo       jitter.Backoff // the backoff, set up by the first decision (boSet)
	boSet    bool
	late     *lateAttempts // keyed attempts going on past WithAttemptTimeout; nil when none may

	attempts   int
	skipped    int           // turns skipped because the default retry quota was empty (awaitQuota)
	polling    bool          // the next attempt is a poll after a keyed 409
	polls      int           // polls made: not counted against WithMaxAttempts
	lastChance bool          // the attempt made is the last one that fitted after a 409
	lastStatus int           // the status of the latest response, 0 before any
	last       attemptResult // the latest attempt's
	lastOut    outcome       // the latest attempt's outcome, with WithRetryIf's word on it

	// What the next attempt's AttemptInfo and the Report say.
	nextReason    string        // why the next attempt is made, "" for the first
	waited        time.Duration // the wait before the next attempt
	skipWait      time.Duration // waited for attempts skipped since the latest one made
	stop          string        // why the operation ended (Report.Stop)
	budgetRefused bool
	quota         *retryQuota   // the Transport's default retry quota, nil when it has a Budget
	quotaPaid     int           // units of the quota the operation's retries took
	lastCost      int           // units the latest retry took
	hostHold      time.Duration // waited for host holds
}

// newOperation returns the operation of req under cfg, with its key (the
// header value to add, "" to send req's own) and newKey when the key was
// generated for it. Its attempts go through next; rnd draws the jitter.
func newOperation(next http.RoundTripper, rnd func() float64, quota *retryQuota, cfg *config, req *http.Request, key, header string, newKey bool) operation {
	o := operation{next: next, rnd: rnd, quota: quota, cfg: cfg, req: req, ctx: req.Context(), key: key, header: header, newKey: newKey}
	o.start = time.Now()
	o.capAt = o.start.Add(cfg.maxElapsed)
	o.deadline = o.capAt
	if d, ok := o.ctx.Deadline(); ok && d.Before(o.deadline) {
		o.deadline = d
	}
	return o
}

// run carries out the operation, as a loop that acts on decide's answers:
// one attempt per turn, then the decision, then the wait. It has one exit:
// the operation's end, through end.
func (o *operation) run() (*http.Response, error) {
	cfg := o.cfg
	keyed := o.key != ""
	mayRetry := cfg.maxAttempts > 1 && (keyed || idempotentMethod(o.req.Method))

	// Read a body without GetBody into memory, so that it can be sent again.
	var err error
	if o.body, err = newReplayBody(o.ctx, o.req, cfg.bodyLimit, mayRetry); err != nil {
		return o.end(decision{stop: o.contextStop(stopNotRetryable), cause: err, detail: "reading the request body"})
	}
	cfg.budget.recordRequest(o.start)
	if keyed && mayRetry && cfg.attemptTimeout > 0 && o.body.replayable() {
		o.late = newLateAttempts(finalAnswer(cfg, o.req.Method))
	}

	// A host held back by the budget is waited for, even before a first attempt.
	if d, ok := o.waitForHost(); !ok {
		o.body.close(o.req)
		return o.end(d)
	}

	var nextBody io.ReadCloser // the body of the next attempt, from GetBody
	for {
		// No retry starts with nothing left under the cap (a sleep that
		// overran it); its response was already let go.
		if o.attempts > 0 && !time.Now().Before(o.capAt) {
			closeBody(nextBody)
			o.last.resp = nil
			return o.end(decision{stop: stopDeadline, cause: ErrExhausted, detail: "no time left under " + deadlineName(o.deadline.Before(o.capAt), o.cfg.maxElapsed)})
		}

		// Make one attempt.
		res := o.attempt(nextBody)
		if res.superseded {
			return o.end(decision{late: true}) // an earlier attempt answered (see late.go)
		}
		o.last = res

		// Decide.
		now := time.Now()
		out := o.judged(res.outcome)
		o.lastOut = out
		d := decide(o.state(now), out)
		if d.verdict == verdictStop {
			o.last.refusal = d.refusal
			return o.end(d)
		}
		o.polling, o.lastChance = d.verdict == verdictPoll, d.lastChance
		if o.polling {
			o.polls++
		}

		// Pay for the retry. The shared budget may refuse it, and that ends
		// the operation. The default retry quota, when it cannot pay now,
		// has the operation wait for the retry's turn all the same and pay
		// then, or skip that turn (see awaitQuota).
		if !o.payRetry(now, res.timedOut) {
			o.budgetRefused = true
			if o.quota == nil {
				if l := cfg.logger; l != nil {
					l.LogAttrs(o.ctx, slog.LevelWarn, "idem: retry refused by the budget",
						append(o.logAttrs(), slog.Int("attempts", o.attempts))...)
				}
				return o.end(decision{stop: stopBudget, cause: ErrBudgetExhausted})
			}
			var stop decision
			var ok bool
			if d, stop, ok = o.awaitQuota(d, out, res.timedOut); !ok {
				return o.end(stop)
			}
			res.resp, now = nil, time.Now()
		}
		// GetBody fails: the body cannot be sent again after all.
		if nextBody, err = o.body.next(o.req); err != nil {
			o.refundRetry(now)
			return o.end(decision{stop: stopNotRetryable, cause: &wrapError{sentinel: ErrBodyNotReplayable, err: err}})
		}

		// Retry: report it, let the connection go, and wait. Draining the
		// discarded body may take at most half the time that would be left
		// after the wait, so the next attempt still has time.
		o.notify(d)
		if d.holdPart > 0 {
			o.hostHold += d.holdPart
			if l := cfg.logger; l != nil {
				l.LogAttrs(o.ctx, slog.LevelInfo, "idem: waiting for a host hold",
					append(o.logAttrs(), slog.Duration("hold", d.wait))...)
			}
		}
		discard(res.resp, now.Add(o.deadline.Sub(now.Add(d.wait))/2))
		if err := o.sleep(d.wait); err != nil {
			o.refundRetry(now)
			closeBody(nextBody)
			if err == errAnswered {
				return o.end(decision{late: true}) // an earlier attempt answered (see late.go)
			}
			o.last.resp = nil
			return o.end(decision{stop: o.contextStop(stopCanceled), fromContext: true})
		}
		// Another operation may have put a hold on the host meanwhile.
		if hd, ok := o.waitForHost(); !ok {
			o.refundRetry(now)
			closeBody(nextBody)
			o.last.resp = nil
			return o.end(hd)
		}
	}
}

// report returns the Report of operation o, which returned resp and err.
func (o *operation) report(resp *http.Response, err error) Report {
	r := Report{
		Key:           o.key,
		Attempts:      o.attempts,
		Polls:         o.polls,
		Skipped:       o.skipped,
		Err:           err,
		Elapsed:       time.Since(o.start),
		Stop:          o.stop,
		BudgetRefused: o.budgetRefused,
		HostHold:      o.hostHold,
	}
	if resp != nil {
		r.Status = resp.StatusCode
		if resp != o.last.resp || r.Stop == stopFinalStatus || r.Stop == "" {
			// A late answer, or a status that is not retried.
			r.Stop = stopFinalStatus
			if r.Status < 400 {
				r.Stop = stopSuccess
			}
		}
	}
	return r
}

// awaitQuota waits for the turn of the retry d decided, which the default
// retry quota could not pay for when it was decided, and pays for it then.
// A turn the quota still cannot pay for is skipped: nothing is sent, the
// operation decides again on out (the outcome of its latest attempt, as if
// the skipped one had come to the same) and waits for the next turn. It
// returns the decision of the retry paid for, whose wait is over (its Wait
// is 0), and true; or false and the decision to end the operation with, when
// the turns run out (WithMaxAttempts: Stop "budget"; the cap or the
// deadline: Stop "deadline", a time-out; ErrBudgetExhausted either way) or a
// wait is cut short. The latest response is let go before the first wait,
// which may be long: an end after it has no response to return.
//
// Waiting keeps the operation's schedule and its bounds (the turns skipped
// count against WithMaxAttempts, the cap bounds the waits) while sending
// nothing the quota has not paid for: through a long outage the Transport's
// retries are the quota's, however many operations it carries, and across a
// short one the operations still have turns left when the dependency is
// back, and the quota (refilled by time, then by their answers) pays for
// them.
func (o *operation) awaitQuota(d decision, out outcome, afterTimeout bool) (decision, decision, bool) {
	discard(o.last.resp, time.Now().Add(min(d.wait, time.Until(o.deadline))/2))
	o.last.resp = nil
	for {
		if l := o.cfg.logger; l != nil {
			l.LogAttrs(o.ctx, slog.LevelInfo, "idem: retry waits for the retry quota",
				append(o.logAttrs(), slog.Int("attempts", o.attempts), slog.Duration("delay", d.wait))...)
		}
		if err := o.sleep(d.wait); err != nil {
			if err == errAnswered {
				return d, decision{late: true}, false // an earlier attempt answered (see late.go)
			}
			return d, decision{stop: o.contextStop(stopCanceled), fromContext: true}, false
		}
		o.skipWait += d.wait
		now := time.Now()
		if o.payRetry(now, afterTimeout) {
			d.wait, d.holdPart = 0, 0
			return d, decision{}, true
		}
		o.skipped++
		next := decide(o.state(now), out)
		if next.verdict == verdictStop {
			// The turns ran out (Stop "budget"), or the time did: the cap
			// or the deadline ends the operation, a time-out as on any
			// other path (Stop "deadline"), the quota still its cause.
			stop := stopBudget
			if next.stop == stopDeadline {
				stop = stopDeadline
			}
			return d, decision{stop: stop, cause: ErrBudgetExhausted,
				detail: "the retry quota was empty for " + turns(o.skipped) + "; then " + stopDetail(next)}, false
		}
		d = next
		o.lastChance = d.lastChance
	}
}

// turns returns "1 turn" or "n turns".
func turns(n int) string {
	if n == 1 {
		return "1 turn"
	}
	return strconv.Itoa(n) + " turns"
}

// stopDetail says why d stops an operation, in words.
func stopDetail(d decision) string {
	if d.detail != "" {
		return d.detail
	}
	return d.stop
}

// payRetry pays for a retry from the Budget, or from the default quota
// without one, and reports whether it was paid. A poll after a keyed 409 is no
// retry of a failure, and the quota does not pay for it: the server said the
// answer is coming, and polls are bounded on their own (maxPolls, the cap).
func (o *operation) payRetry(now time.Time, afterTimeout bool) bool {
	if o.quota == nil {
		return o.cfg.budget.tryRetry(now)
	}
	if o.polling {
		o.lastCost = 0
		return true
	}
	cost := o.quota.take(now, afterTimeout)
	o.lastCost = cost
	o.quotaPaid += cost
	return cost > 0
}

// refundRetry hands back the retry paid at now, which is not made after all.
func (o *operation) refundRetry(now time.Time) {
	if o.quota == nil {
		o.cfg.budget.refund(now)
		return
	}
	o.quota.give(now, o.lastCost)
	o.quotaPaid -= o.lastCost
	o.lastCost = 0
}

// settleQuota pays the default quota back when the operation ends on an
// answer: its retries' cost, or the credit of an answer at the first attempt.
// A status the table retries (a 503), or WithRetryIf asked to retry, is no
// answer: the dependency is failing, whatever the method or the predicate
// let the operation do about it (an unkeyed POST's 503, a 503 the predicate
// made final). The predicate's word is the one given when the attempt was
// judged: it is not asked again.
func (o *operation) settleQuota(resp *http.Response) {
	if o.quota == nil || resp == nil {
		return
	}
	out := outcome{status: resp.StatusCode}
	if resp == o.last.resp {
		out = o.lastOut
	}
	if reason, _ := tableReason(o.key != "", o.newKey && o.attempts == 1, out); reason != "" || out.custom > 0 {
		return
	}
	now := time.Now()
	if o.attempts <= 1 {
		o.quota.give(now, quotaNoRetryCredit)
		return
	}
	o.quota.give(now, o.quotaPaid)
}

// state is the operation as decide sees it, at now.
func (o *operation) state(now time.Time) state {
	held := time.Duration(0)
	if until := o.cfg.budget.heldUntil(o.req.URL.Host, now); !until.IsZero() {
		held = until.Sub(now)
	}
	if !o.boSet {
		o.bo, o.boSet = jitter.New(o.cfg.jitter.kind(), o.cfg.base, o.cfg.max, o.rnd), true
	}
	return state{
		method:         o.req.Method,
		keyed:          o.key != "",
		fresh:          o.newKey && o.attempts == 1,
		attempts:       o.attempts,
		skipped:        o.skipped,
		polls:          o.polls,
		maxAttempts:    o.cfg.maxAttempts,
		replayable:     o.body.replayable(),
		mismatch:       o.body.mismatch,
		lastChance:     o.lastChance,
		ctxStop:        o.contextStop(""),
		left:           o.deadline.Sub(now),
		byCaller:       o.deadline.Before(o.capAt),
		maxElapsed:     o.cfg.maxElapsed,
		maxRetryAfter:  o.cfg.maxRetryAfter,
		attemptTimeout: o.cfg.attemptTimeout,
		backoff:        o.bo.NextBackOff(),
		held:           held,
		r1:             o.rnd(),
		r2:             o.rnd(),
	}
}

// judged returns out with the WithRetryIf predicate's word on it, if there is
// a predicate.
func (o *operation) judged(out outcome) outcome {
	var resp *http.Response
	if out.status != 0 {
		resp = o.last.resp
	}
	return judge(o.cfg.retryIf, resp, o.key != "", o.newKey && o.attempts == 1, out)
}

// judge returns out with the word of fn (WithRetryIf, nil for none) on it:
// what the table says of out is given to fn with resp, the response it came
// from (nil for an error).
func judge(fn func(*http.Response, error, bool) bool, resp *http.Response, keyed, fresh bool, out outcome) outcome {
	if fn == nil {
		return out
	}
	table, _ := tableReason(keyed, fresh, out)
	err := out.err
	if out.timedOut && err == nil {
		err = context.DeadlineExceeded
	}
	switch retry := fn(resp, err, table != ""); {
	case retry && table == "":
		out.custom = 1
	case !retry && table != "":
		out.custom = -1
	}
	return out
}

// finalAnswer returns the predicate that says whether a late answer ends a
// keyed operation of cfg: its status may not be retried.
func finalAnswer(cfg *config, method string) func(*http.Response) bool {
	return func(resp *http.Response) bool {
		out := judge(cfg.retryIf, resp, true, false, outcome{status: resp.StatusCode})
		reason, _ := classify(method, true, false, out)
		return reason == ""
	}
}

// end ends the operation as d says, with the last attempt's response if it
// has one, else an *Error with d's cause; or, when d.late is set, with the
// late attempt's answer. It is the loop's one exit.
func (o *operation) end(d decision) (*http.Response, error) {
	if d.late {
		o.stop = stopSuccess
		return o.late.taken(), nil
	}
	o.stop = d.stop
	if o.last.resp != nil {
		if d.stop == stopNotRetryable && d.refusal == refuseFinal {
			// A status that is not retried (or that WithRetryIf refused):
			// the answer, not a retry given up on.
			o.stop = stopFinalStatus
			return o.last.resp, nil
		}
		if l := o.cfg.logger; l != nil {
			// Giving up on a response that could have been retried: the
			// retries ran out, or the request cannot be sent again.
			l.LogAttrs(o.ctx, slog.LevelWarn, "idem: giving up", append(o.logAttrs(),
				slog.Int("attempts", o.attempts),
				slog.Int("status", o.last.resp.StatusCode),
				slog.String("stop", d.stop),
				slog.String("detail", o.giveUpDetail(d)))...)
		}
		return o.last.resp, nil
	}
	cause := d.cause
	if d.fromContext {
		cause = context.Cause(o.ctx)
	}
	return nil, o.fail(cause, d.detail)
}

// giveUpDetail says, for the log, why d ends an operation on a response that
// could have been retried ("" when its Stop says it all).
func (o *operation) giveUpDetail(d decision) string {
	switch {
	case d.detail != "":
		return d.detail
	case d.refusal == refuseRequest: // a method that is not idempotent: never ""
		return "a " + o.req.Method + " without an Idempotency-Key is never repeated"
	case errors.Is(d.cause, ErrBodyNotReplayable) && d.cause != ErrBodyNotReplayable:
		return d.cause.Error() // GetBody failed
	case d.cause == ErrBodyNotReplayable:
		return "the request body cannot be sent again: it has no GetBody, and its length is unknown or over WithBodyBufferLimit"
	}
	return ""
}

// contextStop returns the Report.Stop of an operation whose caller's context
// has ended ("canceled" or "deadline"), or other while it runs.
func (o *operation) contextStop(other string) string {
	switch err := o.ctx.Err(); {
	case err == nil:
		return other
	case errors.Is(err, context.DeadlineExceeded):
		return stopDeadline
	}
	return stopCanceled
}

// waitForHost waits, before an attempt, until the host is no longer held back
// by the budget, and reports true. When the hold (plus its spread) would end
// past the deadline it does not wait, and returns the decision to stop with
// ErrBudgetExhausted; when the context ends during the wait, the decision to
// stop with its cause.
func (o *operation) waitForHost() (decision, bool) {
	if o.cfg.budget == nil {
		return decision{}, true // only a budget holds hosts back
	}
	now := time.Now()
	until := o.cfg.budget.heldUntil(o.req.URL.Host, now)
	if until.IsZero() {
		return decision{}, true
	}
	h := until.Sub(now)
	wait := h + spread(h, o.rnd())
	if !now.Add(wait).Before(o.deadline) {
		return decision{stop: o.contextStop(stopHostHold), cause: ErrBudgetExhausted, detail: "the host is held back for " + h.String() + " after a Retry-After"}, false
	}
	if l := o.cfg.logger; l != nil {
		l.LogAttrs(o.ctx, slog.LevelInfo, "idem: waiting for a host hold",
			append(o.logAttrs(), slog.Duration("hold", wait))...)
	}
	o.hostHold += wait
	o.waited += wait
	switch err := o.sleep(wait); {
	case err == errAnswered:
		return decision{late: true}, false
	case err != nil:
		return decision{stop: o.contextStop(stopCanceled), fromContext: true}, false
	}
	return decision{}, true
}

// closeBody closes the body of an attempt that will not be made.
func closeBody(b io.ReadCloser) {
	if b != nil {
		_ = b.Close()
	}
}

// sleep waits for d, or until the caller's context is done (it then returns
// the context's cause), or until a late attempt answers (errAnswered).
func (o *operation) sleep(d time.Duration) error {
	if d <= 0 {
		return context.Cause(o.ctx)
	}
	var answered <-chan struct{} // nil: never
	if o.late != nil {
		answered = o.late.won
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-o.ctx.Done():
		return context.Cause(o.ctx)
	case <-answered:
		return errAnswered
	case <-timer.C:
		return nil
	}
}

// fail returns the operation's *Error, and logs it when WithLogger is set.
func (o *operation) fail(cause error, detail string) *Error {
	e := &Error{
		Attempts:   o.attempts,
		Key:        o.key,
		LastErr:    o.last.err,
		LastStatus: o.lastStatus,
		Cause:      cause,
		detail:     detail,
		refusal:    o.last.refusal,
		timeout:    o.stop == stopDeadline,
	}
	if l := o.cfg.logger; l != nil {
		l.LogAttrs(o.ctx, slog.LevelWarn, "idem: giving up",
			slog.String("method", o.req.Method),
			slog.String("url", o.req.URL.Redacted()),
			slog.String("key", o.key),
			slog.Int("attempts", o.attempts),
			slog.String("error", e.Error()))
	}
	return e
}

// notify records the retry decided by d for the next attempt's AttemptInfo,
// and reports it to WithOnRetry and WithLogger.
func (o *operation) notify(d decision) {
	cfg := o.cfg
	o.nextReason, o.waited = d.reason, o.skipWait+d.wait
	o.skipWait = 0
	if cfg.onRetry == nil && cfg.logger == nil {
		return
	}
	next := AttemptInfo{
		Number:     o.attempts + 1,
		Reason:     d.reason,
		Wait:       o.waited,
		Poll:       o.polling,
		Key:        o.key,
		Status:     o.last.status,
		Err:        o.last.err,
		RetryAfter: o.last.retryAfter,
	}
	if cfg.onRetry != nil {
		cfg.onRetry(o.ctx, next)
	}
	if cfg.logger != nil {
		attrs := append(o.logAttrs(),
			slog.Int("attempt", o.attempts),
			slog.String("reason", next.Reason),
			slog.Duration("delay", d.wait))
		if next.Status != 0 {
			attrs = append(attrs, slog.Int("status", next.Status))
		}
		if next.Err != nil {
			attrs = append(attrs, slog.String("error", next.Err.Error()))
		}
		cfg.logger.LogAttrs(o.ctx, slog.LevelInfo, "idem: retrying", attrs...)
	}
}

// logAttrs returns the attributes every log line of the operation has.
func (o *operation) logAttrs() []slog.Attr {
	method := o.req.Method
	if method == "" {
		method = http.MethodGet
	}
	return []slog.Attr{
		slog.String("method", method),
		slog.String("url", o.req.URL.Redacted()),
		slog.String("key", o.key),
	}
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
		resp, err := o.next.RoundTrip(o.attemptRequest(o.ctx, nextBody, limit))
		return o.readResponse(now, resp, err)
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
	resp, err := o.next.RoundTrip(req)
	if !timer.Stop() {
		// The bound fired: whatever came back may be cut.
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return attemptResult{outcome: outcome{err: context.Cause(ctx), timedOut: o.ctx.Err() == nil}}
	}
	return o.headersCame(now, b, resp, err)
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
	return o.readResponse(start, resp, err)
}

// readResponse reads what the operation needs from a response: its status, and the
// Retry-After of a 409, 429 or 503 (which, on a 429 or 503, holds the host
// back for every operation sharing the budget, for at most WithMaxRetryAfter).
func (o *operation) readResponse(now time.Time, resp *http.Response, err error) attemptResult {
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

// pollTimeout is the least an attempt after a keyed 409 may wait for its
// answer, however short WithAttemptTimeout is (the cap still bounds it).
const pollTimeout = 5 * time.Second

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
		r.Header = keyedHeader(o.req.Header, o.header, !(o.newKey && first), limit)
	}
	o.body.set(r, first, nextBody)
	return r
}

// waitLate waits until a late attempt answers, every late attempt has
// ended, the caller's context is done or the deadline passes.
func (o *operation) waitLate() {
	ctx, cancel := context.WithDeadline(o.ctx, o.deadline)
	defer cancel()
	o.late.waitAnswer(ctx.Done())
}

// settle decides what the operation returns once its loop has ended with resp
// and err: a late attempt's final answer taken meanwhile wins over the loop's
// result, unless the loop ended because the caller's context did. What is not
// returned is let go.
func (o *operation) settle(resp *http.Response, err error) (*http.Response, error) {
	if o.late == nil {
		return resp, err
	}
	if resp == nil && err != nil && o.ctx.Err() == nil {
		// Giving up with attempts still going on: one of them may bring the
		// answer (a payment that went through). Wait for it, as long as the
		// deadline allows.
		o.waitLate()
	}
	answer := o.late.close()
	if answer == nil || answer == resp {
		return resp, err
	}
	if err != nil && o.ctx.Err() != nil {
		discard(answer, time.Now().Add(lateDrain))
		return resp, err
	}
	if resp != nil {
		discard(resp, time.Now().Add(lateDrain))
	}
	return answer, nil
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
