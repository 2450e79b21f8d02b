package retry

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/internal/jitter"
)

// Op is one logical operation under way: its plan, its driver, how far it
// has come (the Progress that Decide reads) and what it will report (its
// Record). Make it with New, run it once with Run.
type Op struct {
	ctx      context.Context
	plan     Plan
	driver   Driver
	deadline time.Time      // the earlier of capAt and the context's deadline
	bo       jitter.Backoff // set up by the first decision (boSet)
	boSet    bool

	rec     Record
	polling bool    // the next attempt is a poll after an InProgress
	last    Outcome // the latest attempt's, with the predicate's word on it
	held    bool    // the driver holds the latest attempt's answer
	next    next
	pay     payment
	decided time.Time // when the latest decision was made; the attempt's start for one that could not retry
	clock   time.Time // a reading of the clock nothing has come after since, for the next attempt; zero when none
}

// next is what the next attempt's Attempt says of the wait before it.
type next struct {
	reason   string        // why it is made, "" for the first
	waited   time.Duration // the wait before it
	skipWait time.Duration // waited for turns skipped since the latest attempt made
}

// payment is what the operation's retries have cost, for a refund and for
// Limit.Answered.
type payment struct {
	paid int // what the retries took in all
	last int // what the latest retry took
}

// Record is what an operation did: what its report and its error say.
type Record struct {
	Progress                    // attempts, skipped turns, polls
	Stop          string        // why it ended
	BudgetRefused bool          // the limit could not pay for a retry when it was decided
	HostHold      time.Duration // waited for host holds
	LastStatus    int           // the Code of the latest answer, 0 before any
	LastErr       error         // the latest attempt's error
	Refusal       Refusal       // why the latest outcome was not retried, when that ended it
}

// Result is how an operation ended: the decision that ended it, and whether
// the latest attempt's answer, which the driver holds, is what it returns
// (else an error with the decision's Cause, or, with Late, the answer of an
// attempt that went on past its time-out).
type Result struct {
	Decision
	Answer bool
}

// New returns the operation of plan, whose attempts the driver makes, under
// ctx (the caller's: its end ends the operation, its deadline bounds it).
func New(ctx context.Context, plan Plan, d Driver) *Op {
	o := new(Op)
	o.Init(ctx, plan, d)
	return o
}

// Init makes o the operation New returns, in place: a driver can hold its Op
// as a value.
func (o *Op) Init(ctx context.Context, plan Plan, d Driver) {
	if plan.Limit == nil {
		plan.Limit = NoLimit
	}
	*o = Op{ctx: ctx, plan: plan, driver: d, clock: plan.FirstAt}
	o.deadline = o.capAt()
	if dl, ok := ctx.Deadline(); ok && dl.Before(o.deadline) {
		o.deadline = dl
	}
}

// Start is when the operation began (Plan.Start).
func (o *Op) Start() time.Time { return o.plan.Start }

// End ends the operation as d says, without an attempt: for a driver that
// cannot make the first one (a request body it could not read).
func (o *Op) End(d Decision) Result { return o.end(d) }

// capAt is when the cap ends: Plan.Start + MaxElapsed.
func (o *Op) capAt() time.Time { return o.plan.Start.Add(o.plan.Bounds.MaxElapsed) }

// Deadline is the operation's deadline: the earlier of the cap and the
// caller's.
func (o *Op) Deadline() time.Time { return o.deadline }

// Record returns what the operation did so far.
func (o *Op) Record() Record {
	r := o.rec
	r.LastErr = o.last.Err
	return r
}

// Run carries out the operation, as a loop that acts on Decide's answers:
// one attempt per turn, then the decision, then the payment and the wait. It
// has one exit: the operation's end, through end.
func (o *Op) Run() Result {
	o.plan.Limit.Start(o.plan.Start)
	// A host held back by the limit is waited for, even before a first attempt.
	if d, ok := o.waitForHost(); !ok {
		o.driver.Unsent()
		return o.end(d)
	}
	for {
		// No retry starts with nothing left under the cap (a sleep that
		// overran it); its answer was already let go.
		if o.rec.Attempts > 0 && !time.Now().Before(o.capAt()) {
			o.driver.Unsent()
			o.held = false
			return o.end(Decision{Stop: StopDeadline, Cause: ErrExhausted, Detail: "no time left under " + deadlineName(o.times())})
		}

		// Make one attempt.
		out, superseded := o.attempt()
		if superseded {
			return o.end(Decision{Late: true}) // an earlier attempt answered
		}

		// Decide. An outcome that is not retried needs no new reading of
		// the clock: Decide stops on it before it looks at the time, and the
		// limit is paid back at the attempt's start (see Settle).
		now, retryable := o.decided, o.retryable(out)
		if retryable {
			now = time.Now()
			o.decided = now
		}
		d := Decide(o.state(now, out, retryable), out)
		if d.Verdict == Stop {
			o.rec.Refusal = d.Refusal
			return o.end(d)
		}
		o.polling, o.rec.LastChance = d.Verdict == Poll, d.LastChance
		if o.polling {
			o.rec.Polls++
		}

		// Pay for the retry: a limit that cannot pay ends the operation, or
		// has it wait for the retry's turn (see awaitTurn).
		var ok bool
		if d, now, ok = o.payFor(d, now, out); !ok {
			return o.end(d)
		}
		// The request cannot be sent again after all.
		if err := o.driver.Rewind(); err != nil {
			o.refund(now)
			return o.end(Decision{Stop: StopNotRetryable, Cause: &WrapError{Sentinel: ErrBodyNotReplayable, Err: err}})
		}

		// Retry: report it, let the answer go, and wait.
		if d, ok = o.wait(d, now); !ok {
			return o.end(d)
		}
	}
}

// attempt makes the next attempt and returns its outcome, or superseded.
func (o *Op) attempt() (Outcome, bool) {
	o.rec.Attempts++
	now := o.clock
	if now.IsZero() {
		now = time.Now()
	}
	o.clock, o.decided = time.Time{}, now
	bound, capped := o.attemptBound(now)
	limit := o.deadline.Sub(now) // how long the attempt may wait for its answer
	if bound > 0 {
		limit = min(limit, bound)
	}
	out, superseded := o.driver.Attempt(Attempt{
		Number: o.rec.Attempts, Reason: o.next.reason, Wait: o.next.waited, Poll: o.polling,
		Fresh: o.fresh(), Prev: o.last, Start: now, Bound: bound, Capped: capped, Limit: limit,
	})
	if superseded {
		return out, true
	}
	o.last, o.held = out, out.Class != NoAnswer
	if o.held {
		o.rec.LastStatus = out.Code
		// A 429 or 503 with Retry-After holds the host back for every
		// operation sharing the limit, for at most WithMaxRetryAfter.
		if out.Holds && out.HasRetryAfter && out.RetryAfter > 0 {
			o.plan.Limit.Hold(o.plan.Host, now.Add(min(out.RetryAfter, o.plan.Bounds.MaxRetryAfter)))
		}
	}
	return out, false
}

// fresh reports whether the latest attempt is the first under a key
// generated for the operation.
func (o *Op) fresh() bool { return o.plan.Request.FreshKey && o.rec.Attempts == 1 }

// pollTimeout is the least an attempt after an InProgress may wait for its
// answer, however short the attempt time-out is (the cap still bounds it).
const pollTimeout = 5 * time.Second

// attemptBound returns how long the next attempt may wait for its answer's
// start (0: no bound of ours), and whether the bound is the cap. Every
// attempt, the first included, is bounded by the attempt time-out and by the
// time left under the cap, so an operation ends within its cap even when its
// first attempt hangs. When the caller's context ends before the cap and
// before the attempt time-out, the context bounds the first attempt and
// needs no help.
//
// An attempt after an InProgress is a poll of a server known to be working
// on the answer: it may wait pollTimeout (5s) even when the attempt time-out
// is shorter (the HTTP driver says so with Prefer: wait, so that the server
// holds it until the first request's answer exists).
func (o *Op) attemptBound(now time.Time) (time.Duration, bool) {
	at := o.plan.Bounds.AttemptTimeout
	if o.polling && at > 0 {
		at = max(at, pollTimeout)
	}
	if o.rec.Attempts == 1 && o.deadline.Before(o.capAt()) && (at <= 0 || o.deadline.Sub(o.plan.Start) <= at) {
		return 0, false
	}
	left := max(o.capAt().Sub(now), 1)
	if at > 0 && at <= left {
		return at, false
	}
	return left, true
}

// retryable reports whether Decide may retry out, or must stop on it
// whatever the time (see Decide): only then does a decision read the clock,
// and draw what a wait needs.
func (o *Op) retryable(out Outcome) bool {
	r := o.plan.Request
	if r.Mismatch || out.Class == NoAnswer && o.ctx.Err() != nil {
		return false
	}
	reason, _ := Classify(r.Repeatable, r.Keyed, o.fresh(), out)
	return reason != ""
}

// state is the operation as Decide sees it, at now, after an attempt that
// came to out. What only a wait needs (the backoff's next draw, the host's
// hold, the spreads' random numbers) is drawn only when out may be retried
// (retryable): an answer that is final, the success path above all, draws
// nothing.
func (o *Op) state(now time.Time, out Outcome, retryable bool) State {
	r := o.plan.Request
	s := State{
		Repeatable: r.Repeatable, Keyed: r.Keyed, Fresh: o.fresh(),
		Progress: o.rec.Progress, MaxAttempts: o.plan.Bounds.MaxAttempts,
		Replayable: r.Replayable, Mismatch: r.Mismatch,
		CtxStop: o.contextStop(""),
		Time:    o.times(),
	}
	s.Time.Left = o.deadline.Sub(now)
	if !retryable {
		return s
	}
	if !o.boSet {
		o.bo, o.boSet = jitter.New(o.plan.Backoff.Jitter, o.plan.Backoff.Base, o.plan.Backoff.Max, o.plan.Rand), true
	}
	s.Time.Backoff = o.bo.NextBackOff()
	if until := o.plan.Limit.HeldUntil(o.plan.Host, now); !until.IsZero() {
		s.Time.Held = until.Sub(now)
	}
	s.Random = [2]float64{o.plan.Rand(), o.plan.Rand()}
	return s
}

// times is the operation's Times, less what only a decision's moment knows.
func (o *Op) times() Times {
	b := o.plan.Bounds
	return Times{ByCaller: o.deadline.Before(o.capAt()), MaxElapsed: b.MaxElapsed,
		MaxRetryAfter: b.MaxRetryAfter, AttemptTimeout: b.AttemptTimeout}
}

// end ends the operation as d says. It is the loop's one exit.
func (o *Op) end(d Decision) Result {
	if d.Late {
		o.rec.Stop = StopSuccess
		return Result{Decision: d}
	}
	o.rec.Stop = d.Stop
	if o.held && d.Stop == StopNotRetryable && d.Refusal == RefuseFinal {
		// An answer that is not retried (or that a predicate refused): the
		// answer, not a retry given up on.
		o.rec.Stop = StopFinalStatus
	}
	if d.FromContext {
		d.Cause = context.Cause(o.ctx)
	}
	return Result{Decision: d, Answer: o.held}
}

// contextStop returns the Stop of an operation whose caller's context has
// ended ("canceled" or "deadline"), or other while it runs.
func (o *Op) contextStop(other string) string { return ContextStop(o.ctx, other) }

// ContextStop returns the Stop of an operation under ctx once ctx has ended
// ("canceled" or "deadline"), or other while it runs.
func ContextStop(ctx context.Context, other string) string {
	switch err := ctx.Err(); {
	case err == nil:
		return other
	case errors.Is(err, context.DeadlineExceeded):
		return StopDeadline
	}
	return StopCanceled
}
