package idem

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// maxSpread bounds the random spread added to a wait the server named.
const maxSpread = time.Second

// operation is the state of one logical operation: one call of RoundTrip.
type operation struct {
	t   *Transport
	cfg *config
	req *http.Request // the caller's, never modified
	ctx context.Context

	key    string // "" when unkeyed
	header string // Idempotency-Key value to add, "" to send req's headers
	newKey bool   // key was generated for this operation: no server can have it in progress yet
	body   replayBody

	start    time.Time
	capAt    time.Time     // start + WithMaxElapsed
	deadline time.Time     // the earlier of capAt and the context's deadline
	bo       BackOff       // made on the first retry
	late     *lateAttempts // keyed attempts going on past WithAttemptTimeout; nil when none may

	attempts   int
	polling    bool          // the latest attempt got a keyed 409: the next one is a poll
	polls      int           // attempts answered 409 in progress: not counted against WithMaxAttempts
	lastChance bool          // the attempt made is the last one that fitted after a 409
	lastStatus int           // the status of the latest response, 0 before any
	last       attemptResult // the latest attempt's

	// What the next attempt's AttemptInfo and the Report say.
	nextReason    string        // why the next attempt is made, "" for the first
	waited        time.Duration // the wait before the next attempt
	stop          string        // why the operation ended (Report.Stop)
	budgetRefused bool
	hostHold      time.Duration // waited for host holds
	holdPart      time.Duration // of the wait nextWait chose, the part a host hold added
}

func newOperation(t *Transport, cfg *config, req *http.Request, key, header string) operation {
	o := operation{t: t, cfg: cfg, req: req, ctx: req.Context(), key: key, header: header}
	o.start = time.Now()
	o.capAt = o.start.Add(cfg.maxElapsed)
	o.deadline = o.capAt
	if d, ok := o.ctx.Deadline(); ok && d.Before(o.deadline) {
		o.deadline = d
	}
	return o
}

// run carries out the operation: one loop, one attempt per turn, and every
// reason to stop decided here, in order.
func (o *operation) run() (*http.Response, error) {
	cfg := o.cfg
	keyed := o.key != ""
	mayRetry := cfg.maxAttempts > 1 && (keyed || idempotentMethod(o.req.Method) || cfg.retryUnsent)

	// Read a body without GetBody into memory, so that it can be sent again.
	var err error
	if o.body, err = newReplayBody(o.ctx, o.req, cfg.bodyLimit, mayRetry); err != nil {
		o.stop = o.contextStop(stopNotRetryable)
		return nil, &Error{Key: o.key, LastErr: err, detail: "reading the request body", timeout: o.stop == stopDeadline}
	}
	cfg.budget.recordRequest(o.start)
	if keyed && mayRetry && cfg.attemptTimeout > 0 && o.body.replayable() {
		o.late = newLateAttempts(o.req.Method, keyed, cfg.retryUnsent)
	}

	// A host held back by the budget is waited for, even before a first attempt.
	if detail, cause := o.waitForHost(); cause != nil {
		o.body.close(o.req)
		o.stop = o.contextStop(stopHostHold)
		return nil, o.fail(cause, detail)
	}

	var nextBody io.ReadCloser // the body of the next attempt, from GetBody
	for {
		// No retry starts with nothing left under the cap (a sleep that
		// overran it); its response was already let go.
		if o.attempts > 0 && !time.Now().Before(o.capAt) {
			if nextBody != nil {
				_ = nextBody.Close()
			}
			o.last.resp = nil
			o.stop = stopDeadline
			return nil, o.fail(ErrExhausted, "no time left under "+o.deadlineName())
		}

		// Make one attempt.
		res := o.attempt(nextBody)
		if res.superseded {
			return o.late.result(), nil // an earlier attempt answered (see late.go)
		}
		o.last = res

		// The attempt failed because the caller's context ended: stop at
		// once with its cause. (A response that came is still judged below;
		// the wait before a retry ends at once anyway.)
		if res.resp == nil && o.ctx.Err() != nil {
			o.stop = o.contextStop("")
			return nil, o.fail(context.Cause(o.ctx), "")
		}

		// May this outcome be repeated at all?
		res.fresh = o.newKey && o.attempts == 1
		reason, why := classify(o.req.Method, keyed, cfg.retryUnsent, res.outcome)
		if o.body.mismatch {
			// A body that is not its ContentLength: net/http's error, as it is.
			reason, why = 0, refuseError
		}
		if reason == 0 {
			o.last.refusal = why
			o.stop = stopNotRetryable
			return o.finish(nil, "")
		}

		// The last attempt that fitted after a 409 was made.
		if o.lastChance {
			o.stop = stopDeadline
			return o.finish(ErrExhausted, "the last attempt that fitted before "+o.deadlineName()+" was made")
		}
		// Every attempt is used. A 409 in progress is a poll for an answer
		// that exists or soon will, not a failure: it does not use up an
		// attempt, but at most maxPolls are made.
		inProgress := reason == ReasonInProgress
		if inProgress {
			o.polls++
		}
		o.polling = inProgress
		if o.attempts-o.polls >= cfg.maxAttempts || o.polls > maxPolls {
			o.stop = stopExhausted
			return o.finish(ErrExhausted, "all attempts used")
		}
		// The body cannot be sent again.
		if !o.body.replayable() {
			o.stop = stopNotRetryable
			return o.finish(ErrBodyNotReplayable, "")
		}
		// The server asks for more than we wait (after a 409, the deadline
		// decides instead, below).
		if res.hasRetryAfter && res.retryAfter > cfg.maxRetryAfter && !inProgress {
			o.stop = stopExhausted
			return o.finish(ErrExhausted, "Retry-After "+res.retryAfter.String()+" exceeds WithMaxRetryAfter")
		}
		// The next wait would end past the cap or the caller's deadline. After
		// a 429 or 503 that is the end: the server asked for room. After a
		// 409 (whose wait also stops at WithMaxRetryAfter), if one meaningful
		// attempt still fits, wait what remains less that attempt, and make it.
		now := time.Now()
		wait := o.nextWait(now, res.retryAfter)
		left := o.deadline.Sub(now)
		if res.retryAfter > cfg.maxRetryAfter {
			left = min(left, cfg.maxRetryAfter)
		}
		switch {
		case inProgress && wait >= left:
			last, ok := o.lastAttemptWait(left)
			if !ok {
				o.stop = stopDeadline
				return o.finish(ErrExhausted, "the next wait of "+wait.String()+" would end past "+o.deadlineName())
			}
			wait, o.lastChance = last, true
		case !now.Add(wait).Before(o.deadline):
			o.stop = stopDeadline
			return o.finish(ErrExhausted, "the next wait of "+wait.String()+" would end past "+o.deadlineName())
		}
		// The shared budget refuses the retry.
		if !cfg.budget.tryRetry(now) {
			o.stop, o.budgetRefused = stopBudget, true
			return o.finish(ErrBudgetExhausted, "")
		}
		// GetBody fails: the body cannot be sent again after all.
		if nextBody, err = o.body.next(o.req); err != nil {
			cfg.budget.refund(now)
			o.stop = stopNotRetryable
			return o.finish(&wrapError{sentinel: ErrBodyNotReplayable, err: err}, "")
		}

		// Retry: report it, let the connection go, and wait. Draining the
		// discarded body may take at most half the time that would be left
		// after the wait, so the next attempt still has time.
		o.notify(wait, reason)
		o.hostHold += o.holdPart
		discard(res.resp, now.Add(o.deadline.Sub(now.Add(wait))/2))
		werr := o.sleep(wait)
		detail := ""
		if werr == nil {
			// Another operation may have put a hold on the host meanwhile.
			detail, werr = o.waitForHost()
		}
		if werr != nil {
			cfg.budget.refund(now)
			if nextBody != nil {
				_ = nextBody.Close()
			}
			if werr == errAnswered {
				return o.late.result(), nil // an earlier attempt answered (see late.go)
			}
			o.last.resp = nil
			o.stop = o.contextStop(stopHostHold)
			return nil, o.fail(werr, detail)
		}
	}
}

// pollInterval bounds the wait before a poll after a keyed 409 without
// Retry-After: the wait is drawn from [pollInterval/2, pollInterval).
const pollInterval = time.Second

// maxPolls bounds the retries after a 409 in progress in one operation.
const maxPolls = 10

// pollTimeout is the least an attempt after a keyed 409 may wait for its
// answer, however short WithAttemptTimeout is (the cap still bounds it).
const pollTimeout = 5 * time.Second

// minLastAttempt is the shortest attempt worth making after a 409 whose
// Retry-After ends past the deadline.
const minLastAttempt = 100 * time.Millisecond

// lastAttemptWait returns the wait before one last attempt, after a 409 whose
// Retry-After ends past the deadline (or past WithMaxRetryAfter): of the time
// left, all but one attempt's worth (WithAttemptTimeout, or half of what is
// left without one). It reports false when that attempt would be shorter than
// minLastAttempt.
func (o *operation) lastAttemptWait(left time.Duration) (time.Duration, bool) {
	worth := left / 2
	if at := o.cfg.attemptTimeout; at > 0 && at < left {
		worth = at
	}
	if worth < minLastAttempt {
		return 0, false
	}
	return left - worth, true
}

// contextStop returns the Report.Stop of an operation that ends on an error
// other than ErrExhausted: "canceled" or "deadline" when the caller's context
// is done, otherwise other.
func (o *operation) contextStop(other string) string {
	switch err := o.ctx.Err(); {
	case err == nil:
		return other
	case errors.Is(err, context.DeadlineExceeded):
		return stopDeadline
	}
	return stopCanceled
}

// deadlineName names what bounds the operation: the cap or the caller's deadline.
func (o *operation) deadlineName() string {
	if o.deadline.Before(o.capAt) {
		return "the context's deadline"
	}
	return "the WithMaxElapsed cap of " + o.cfg.maxElapsed.String()
}

// nextWait returns the wait before the next attempt: the backoff, raised to the
// server's Retry-After (plus a small random spread) and to the time the host is
// held back by the budget.
func (o *operation) nextWait(now time.Time, retryAfter time.Duration) time.Duration {
	cfg := o.cfg
	if o.bo == nil {
		o.bo = newJitterBackOff(cfg.jitter, cfg.base, cfg.max, o.t.random)
	}
	wait := o.bo.NextBackOff()
	switch {
	case o.key != "" && o.last.status == http.StatusConflict && retryAfter > 0:
		// A keyed 409 is a poll, not a failure: the server named when its
		// answer will be ready, and backing off past that only delays it.
		wait = retryAfter + o.spread(retryAfter)
	case o.key != "" && o.last.status == http.StatusConflict:
		// Without a Retry-After the answer may exist already: poll soon.
		wait = pollInterval/2 + scaleDuration(pollInterval/2, o.t.random())
	case retryAfter > 0:
		wait = max(wait, retryAfter+o.spread(retryAfter))
	}
	o.holdPart = 0
	if until := cfg.budget.heldUntil(o.req.URL.Host, now); !until.IsZero() {
		if h := until.Sub(now); h > wait {
			held := h + o.spread(h)
			o.holdPart, wait = held-wait, held
		}
	}
	return wait
}

// spread returns a random U[0, min(1s, d/10)), added to a wait the server
// named so that clients told the same thing do not return in lock-step.
func (o *operation) spread(d time.Duration) time.Duration {
	return scaleDuration(min(maxSpread, d/10), o.t.random())
}

// waitForHost waits, before an attempt, until the host is no longer held back
// by the budget. It returns ErrHostCoolingDown, without waiting, when the hold
// (plus its spread) would end past the deadline, or the context's cause if it
// is done during the wait.
func (o *operation) waitForHost() (detail string, cause error) {
	if o.cfg.budget == nil {
		return "", nil // only a budget holds hosts back
	}
	now := time.Now()
	until := o.cfg.budget.heldUntil(o.req.URL.Host, now)
	if until.IsZero() {
		return "", nil
	}
	h := until.Sub(now)
	wait := h + o.spread(h)
	if !now.Add(wait).Before(o.deadline) {
		return "held for " + h.String(), ErrHostCoolingDown
	}
	o.hostHold += wait
	return "", o.sleep(wait)
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

// finish ends the operation on its last attempt: its response if it has one,
// else an *Error with the given cause (nil when the last error may not be
// retried).
func (o *operation) finish(cause error, detail string) (*http.Response, error) {
	if o.last.resp != nil {
		return o.last.resp, nil
	}
	return nil, o.fail(cause, detail)
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

// notify reports a retry to WithOnRetry and WithLogger.
func (o *operation) notify(wait time.Duration, reason Reason) {
	cfg := o.cfg
	o.nextReason, o.waited = reason.name(), wait
	if cfg.onRetry == nil && cfg.logger == nil {
		return
	}
	next := AttemptInfo{
		Number: o.attempts + 1,
		Reason: o.nextReason,
		Wait:   wait,
		Poll:   o.polling,
		Key:    o.key,
		Status: o.last.status,
		Err:    o.last.err,

		RetryAfter: o.last.retryAfter,
	}
	if cfg.onRetry != nil {
		cfg.onRetry(o.ctx, next)
	}
	if cfg.logger != nil {
		method := o.req.Method
		if method == "" {
			method = http.MethodGet
		}
		attrs := []slog.Attr{
			slog.Int("attempt", o.attempts),
			slog.String("method", method),
			slog.String("url", o.req.URL.Redacted()),
			slog.String("key", o.key),
			slog.String("reason", next.Reason),
			slog.Duration("delay", wait),
		}
		if next.Status != 0 {
			attrs = append(attrs, slog.Int("status", next.Status))
		}
		if next.Err != nil {
			attrs = append(attrs, slog.String("error", next.Err.Error()))
		}
		cfg.logger.LogAttrs(o.ctx, slog.LevelInfo, "idem: retrying", attrs...)
	}
}
