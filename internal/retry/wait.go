package retry

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"
)

// errAnswered ends a wait of the operation when an attempt going on past its
// time-out has answered.
var errAnswered = errors.New("idem: a late attempt answered")

// payFor pays for the retry d decided at now. A limit that cannot pay either
// ends the operation (a shared Budget refuses) or has it wait for the retry's
// turn and pay then (see awaitTurn). It returns the decision to go on with
// and the time it was paid at, and true; or the decision to end with, and
// false.
func (o *Op) payFor(d Decision, now time.Time, out Outcome) (Decision, time.Time, bool) {
	if o.take(now, out.TimedOut) {
		return d, now, true
	}
	o.rec.BudgetRefused = true
	if !o.plan.Limit.Queues() {
		o.log(slog.LevelWarn, "idem: retry refused by the budget", slog.Int("attempts", o.rec.Attempts))
		return Decision{Stop: StopBudget, Cause: ErrBudgetExhausted}, now, false
	}
	d, stop, ok := o.awaitTurn(d, out)
	if !ok {
		return stop, now, false
	}
	return d, time.Now(), true
}

// take pays at now for the retry about to be made, and reports whether it was
// paid.
func (o *Op) take(now time.Time, afterTimeout bool) bool {
	cost, ok := o.plan.Limit.Pay(now, o.polling, afterTimeout)
	if ok {
		o.pay.last = cost
		o.pay.paid += cost
	}
	return ok
}

// refund hands back the retry paid at now, which is not made after all.
func (o *Op) refund(now time.Time) {
	o.plan.Limit.Refund(now, o.pay.last)
	o.pay.paid -= o.pay.last
	o.pay.last = 0
}

// Settle pays the limit back when the operation ends on an answer whose
// outcome is out: the retries' cost, or the credit of an answer at the first
// attempt (see Limit.Answered). An outcome the table retries (a 503), or a
// predicate asked to retry, is no answer: the dependency is failing, whatever
// the request or the predicate let the operation do about it. The limit is
// paid at the latest decision's time, which the clock need not be read again
// for: the start of the latest attempt when its outcome was not retried.
func (o *Op) Settle(out Outcome) {
	if Answered(o.plan.Request.Keyed, o.fresh(), out) {
		o.plan.Limit.Answered(o.decided, o.rec.Attempts, o.pay.paid)
	}
}

// Last returns the latest attempt's outcome, with the predicate's word on it.
func (o *Op) Last() Outcome { return o.last }

// awaitTurn waits for the turn of the retry d decided, which the limit could
// not pay for when it was decided, and pays for it then. A turn it still
// cannot pay for is skipped: nothing is sent, the operation decides again on
// out (the outcome of its latest attempt, as if the skipped one had come to
// the same) and waits for the next turn. It returns the decision of the retry
// paid for, whose wait is over (its Wait is 0), and true; or false and the
// decision to end the operation with, when the turns run out (the attempts:
// Stop "budget"; the cap or the deadline: Stop "deadline", a time-out;
// ErrBudgetExhausted either way) or a wait is cut short. The latest answer
// is let go before the first wait, which may be long.
//
// Waiting keeps the operation's schedule and its bounds while sending nothing
// the limit has not paid for: through a long outage the retries are the
// limit's, however many operations it carries, and across a short one the
// operations still have turns left when the dependency is back.
func (o *Op) awaitTurn(d Decision, out Outcome) (Decision, Decision, bool) {
	o.release(time.Now().Add(min(d.Wait, time.Until(o.deadline)) / 2))
	for {
		o.log(slog.LevelInfo, "idem: retry waits for the retry quota",
			slog.Int("attempts", o.rec.Attempts), slog.Duration("delay", d.Wait))
		if stop, ok := o.sleepOrEnd(d.Wait); !ok {
			return d, stop, false
		}
		o.next.skipWait += d.Wait
		now := time.Now()
		if o.take(now, out.TimedOut) {
			d.Wait, d.HoldPart = 0, 0
			return d, Decision{}, true
		}
		o.rec.Skipped++
		next := Decide(o.state(now, out, o.retryable(out)), out)
		if next.Verdict == Stop {
			// The turns ran out (Stop "budget"), or the time did: the cap
			// or the deadline ends the operation, a time-out as on any
			// other path (Stop "deadline"), the limit still its cause.
			stop := StopBudget
			if next.Stop == StopDeadline {
				stop = StopDeadline
			}
			return d, Decision{Stop: stop, Cause: ErrBudgetExhausted,
				Detail: "the retry quota was empty for " + turns(o.rec.Skipped) + "; then " + stopDetail(next)}, false
		}
		d = next
		o.rec.LastChance = d.LastChance
	}
}

// wait reports the retry d, paid at now, lets the latest answer go and waits
// d's wait, then any host hold put on meanwhile. It returns true when the
// retry is to be made, or the decision to end with. Draining the discarded
// answer may take at most half the time that would be left after the wait,
// so the next attempt still has time.
func (o *Op) wait(d Decision, now time.Time) (Decision, bool) {
	o.notify(d)
	if d.HoldPart > 0 {
		o.rec.HostHold += d.HoldPart
		o.log(slog.LevelInfo, "idem: waiting for a host hold", slog.Duration("hold", d.Wait))
	}
	o.release(now.Add(o.deadline.Sub(now.Add(d.Wait)) / 2))
	if stop, ok := o.sleepOrEnd(d.Wait); !ok {
		o.refund(now)
		o.driver.Unsent()
		return stop, false
	}
	// Another operation may have put a hold on the host meanwhile.
	if stop, ok := o.waitForHost(); !ok {
		o.refund(now)
		o.driver.Unsent()
		return stop, false
	}
	return Decision{}, true
}

// release lets go of the latest attempt's answer, if the driver still holds
// it, within until.
func (o *Op) release(until time.Time) {
	if o.held {
		o.driver.Release(until)
		o.held = false
	}
}

// notify records the retry decided by d for the next attempt, and reports it
// to the driver and the logger.
func (o *Op) notify(d Decision) {
	o.next.reason, o.next.waited = d.Reason, o.next.skipWait+d.Wait
	o.next.skipWait = 0
	n := Notice{Delay: d.Wait, Next: Attempt{Number: o.rec.Attempts + 1, Reason: d.Reason,
		Wait: o.next.waited, Poll: o.polling, Prev: o.last}}
	o.driver.Retrying(n)
	if o.plan.Logger == nil {
		return
	}
	attrs := []slog.Attr{slog.Int("attempt", o.rec.Attempts), slog.String("reason", d.Reason), slog.Duration("delay", d.Wait)}
	if o.last.Class != NoAnswer {
		attrs = append(attrs, slog.Int("status", o.last.Code))
	}
	if o.last.Err != nil {
		attrs = append(attrs, slog.String("error", o.last.Err.Error()))
	}
	o.log(slog.LevelInfo, "idem: retrying", attrs...)
}

// waitForHost waits, before an attempt, until the host is no longer held
// back by the limit, and reports true. When the hold (plus its spread) would
// end past the deadline it does not wait, and returns the decision to stop
// with ErrBudgetExhausted; when the wait is cut short, the decision to stop
// with its reason.
func (o *Op) waitForHost() (Decision, bool) {
	if !o.plan.Limit.Holds() {
		return Decision{}, true
	}
	now := o.clock
	if now.IsZero() {
		now = time.Now()
	}
	until := o.plan.Limit.HeldUntil(o.plan.Host, now)
	if until.IsZero() {
		o.clock = now // the first attempt starts now
		return Decision{}, true
	}
	o.clock = time.Time{}
	h := until.Sub(now)
	wait := h + spread(h, o.plan.Rand())
	if !now.Add(wait).Before(o.deadline) {
		return Decision{Stop: o.contextStop(StopHostHold), Cause: ErrBudgetExhausted,
			Detail: "the host is held back for " + h.String() + " after a Retry-After"}, false
	}
	o.log(slog.LevelInfo, "idem: waiting for a host hold", slog.Duration("hold", wait))
	o.rec.HostHold += wait
	o.next.waited += wait
	return o.sleepOrEnd(wait)
}

// sleepOrEnd waits for d and reports true, or returns the decision to end
// with when the wait is cut short: by the caller's context, or by an attempt
// going on past its time-out that answered.
func (o *Op) sleepOrEnd(d time.Duration) (Decision, bool) {
	switch err := o.sleep(d); {
	case err == errAnswered:
		return Decision{Late: true}, false
	case err != nil:
		return Decision{Stop: o.contextStop(StopCanceled), FromContext: true}, false
	}
	return Decision{}, true
}

// sleep waits for d, or until the caller's context is done (it then returns
// the context's cause), or until a late attempt answers (errAnswered).
func (o *Op) sleep(d time.Duration) error {
	if d <= 0 {
		return context.Cause(o.ctx)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-o.ctx.Done():
		return context.Cause(o.ctx)
	case <-o.driver.Answered():
		return errAnswered
	case <-timer.C:
		return nil
	}
}

// log logs msg at level with the operation's attributes and attrs, when the
// plan has a logger.
func (o *Op) log(level slog.Level, msg string, attrs ...slog.Attr) {
	if l := o.plan.Logger; l != nil {
		l.LogAttrs(o.ctx, level, msg, append(o.plan.LogAttrs(), attrs...)...)
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
func stopDetail(d Decision) string {
	if d.Detail != "" {
		return d.Detail
	}
	return d.Stop
}
