package idem

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// operation is the HTTP side of one logical operation (one call of
// RoundTrip): the engine (internal/retry) decides, the operation makes the
// attempts it asks for and holds what they bring. It is the engine's
// Driver.
type operation struct {
	next http.RoundTripper // sends the attempts
	cfg  *config
	req  *http.Request // the caller's, never modified
	ctx  context.Context

	key    string // "" when unkeyed
	header string // Idempotency-Key value to add, "" to send req's headers
	newKey bool   // key was generated for this operation: no server can have it in progress yet
	spare  bool   // a value slice of req's header has spare capacity (see keyedHeader)
	body   replayBody

	attempts int            // attempts made
	nextBody io.ReadCloser  // the body of the next attempt, from GetBody
	resp     *http.Response // the latest attempt's response, nil when it had none
	late     *lateAttempts  // keyed attempts going on past WithAttemptTimeout; nil when none may
}

var _ retry.Driver = (*operation)(nil)

// newOperation returns the operation of req under cfg, with its key (the
// header value to add, "" to send req's own) and newKey when the key was
// generated for it.
func newOperation(next http.RoundTripper, cfg *config, req *http.Request, key, header string, newKey bool) *operation {
	o := operations.Get().(*operation)
	*o = operation{next: next, cfg: cfg, req: req, ctx: req.Context(), key: key, header: header, newKey: newKey}
	return o
}

// operations keeps the operations RoundTrip is done with, for the next
// ones: the engine holds an operation as an interface, which puts it on the
// heap, and a Transport carries many (BenchmarkTransportOverhead: the pool
// keeps the success path at the old stack-allocated operation's cost).
var operations = sync.Pool{New: func() any { return new(operation) }}

// free hands o back to the pool once RoundTrip is done with it. Nothing holds
// o then: the attempts still going on (late.go) hold their requests, their
// contexts and lateAttempts, never the operation.
func (o *operation) free() {
	*o = operation{}
	operations.Put(o)
}

// run carries out the operation: it readies the body, has the engine run the
// attempts, and turns the engine's result into RoundTrip's, a late attempt's
// answer taken into account; it pays the limit back and reports to
// WithOnDone. The engine's Op is a value of run's, and so is what it
// records: only the driver (o), which the engine holds as an interface, is on
// the heap, and it holds no more than the attempts need.
func (o *operation) run(limit retry.Limit, rnd func() float64) (*http.Response, error) {
	cfg := o.cfg
	keyed := o.key != ""
	start := time.Now()
	plan := retry.Plan{
		Start:   start,
		Bounds:  cfg.bounds,
		Backoff: cfg.backoff,
		Request: retry.Request{Keyed: keyed, FreshKey: o.newKey, Repeatable: idempotentMethod(o.req.Method)},
		Limit:   limit,
		Host:    o.req.URL.Host,
		Rand:    rnd,
	}
	if cfg.logger != nil {
		plan.Logger, plan.LogAttrs = cfg.logger, o.logAttrs
	}
	mayRetry := cfg.bounds.MaxAttempts > 1 && (keyed || plan.Request.Repeatable)

	// Read a body without GetBody into memory, so that it can be sent again.
	var err error
	o.body, err = newReplayBody(o.ctx, o.req, cfg.bodyLimit, mayRetry)
	plan.Request.Replayable, plan.Request.Mismatch = o.body.replayable(), o.body.mismatch
	if err == nil && !o.body.readAhead() {
		plan.FirstAt = start // no body was read: the first attempt starts now
	}
	var op retry.Op
	op.Init(o.ctx, plan, o)
	var r retry.Result
	if err != nil {
		r = op.End(retry.Decision{Stop: retry.ContextStop(o.ctx, stopNotRetryable),
			Cause: err, Detail: "reading the request body"})
	} else {
		if keyed && mayRetry && cfg.bounds.AttemptTimeout > 0 && o.body.replayable() {
			o.late = newLateAttempts(finalAnswer(cfg, o.req.Method))
		}
		r = op.Run()
	}
	rec := op.Record()
	resp, err := o.end(r, &rec)
	resp, err = o.settle(resp, err, op.Deadline())
	if resp != nil {
		// An answer: the limit is paid back (see retry.Op.Settle). The
		// predicate's word on the latest response is the one given when
		// the attempt was judged: it is not asked again.
		out := op.Last()
		if resp != o.resp { // a late attempt's answer
			out = outcome{status: resp.StatusCode}.engine()
		}
		op.Settle(out)
	}
	if len(cfg.onDone) > 0 {
		cfg.done(o.req, o.report(&rec, op.Start(), resp, err))
	}
	return resp, err
}

// end returns what the engine's result r says: the latest response, or a late
// attempt's answer, or an *Error with r's cause.
func (o *operation) end(r retry.Result, rec *retry.Record) (*http.Response, error) {
	switch {
	case r.Late:
		return o.late.taken(), nil
	case r.Answer && rec.Stop == stopFinalStatus:
		return o.resp, nil // an answer, not a retry given up on
	case r.Answer:
		if l := o.cfg.logger; l != nil {
			// Giving up on a response that could have been retried: the
			// retries ran out, or the request cannot be sent again.
			l.LogAttrs(o.ctx, slog.LevelWarn, "idem: giving up", append(o.logAttrs(),
				slog.Int("attempts", rec.Attempts),
				slog.Int("status", o.resp.StatusCode),
				slog.String("stop", r.Stop),
				slog.String("detail", o.giveUpDetail(r.Decision)))...)
		}
		return o.resp, nil
	}
	return nil, o.fail(rec, r.Cause, r.Detail)
}

// report returns the Report of operation o, which began at start, recorded
// rec and returned resp and err.
func (o *operation) report(rec *retry.Record, start time.Time, resp *http.Response, err error) Report {
	r := Report{
		Key:           o.key,
		Attempts:      rec.Attempts,
		Polls:         rec.Polls,
		Skipped:       rec.Skipped,
		Err:           err,
		Elapsed:       time.Since(start),
		Stop:          rec.Stop,
		BudgetRefused: rec.BudgetRefused,
		HostHold:      rec.HostHold,
	}
	if resp != nil {
		r.Status = resp.StatusCode
		if resp != o.resp || r.Stop == stopFinalStatus || r.Stop == "" {
			// A late answer, or a status that is not retried.
			r.Stop = stopFinalStatus
			if r.Status < 400 {
				r.Stop = stopSuccess
			}
		}
	}
	return r
}

// judged returns out with the WithRetryIf predicate's word on it, if there is
// a predicate.
func (o *operation) judged(out outcome, fresh bool) outcome {
	var resp *http.Response
	if out.status != 0 {
		resp = o.resp
	}
	return judge(o.cfg.retryIf, resp, o.key != "", fresh, out)
}

// judge returns out with the word of fn (WithRetryIf, nil for none) on it:
// what the table says of out is given to fn with resp, the response it came
// from (nil for an error).
func judge(fn func(*http.Response, error, bool) bool, resp *http.Response, keyed, fresh bool, out outcome) outcome {
	if fn == nil {
		return out
	}
	table, _ := retry.TableReason(keyed, fresh, out.engine())
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

// giveUpDetail says, for the log, why d ends an operation on a response that
// could have been retried ("" when its Stop says it all).
func (o *operation) giveUpDetail(d retry.Decision) string {
	switch {
	case d.Detail != "":
		return d.Detail
	case d.Refusal == refuseRequest: // a method that is not idempotent: never ""
		return "a " + o.req.Method + " without an Idempotency-Key is never repeated"
	case errors.Is(d.Cause, ErrBodyNotReplayable) && d.Cause != ErrBodyNotReplayable:
		return d.Cause.Error() // GetBody failed
	case d.Cause == ErrBodyNotReplayable:
		return "the request body cannot be sent again: it has no GetBody, and its length is unknown or over WithBodyBufferLimit"
	}
	return ""
}

// fail returns the operation's *Error, and logs it when WithLogger is set.
func (o *operation) fail(rec *retry.Record, cause error, detail string) *Error {
	e := &Error{
		Attempts:   rec.Attempts,
		Key:        o.key,
		LastErr:    rec.LastErr,
		LastStatus: rec.LastStatus,
		Cause:      cause,
		detail:     detail,
		refusal:    rec.Refusal,
		timeout:    rec.Stop == stopDeadline,
	}
	if l := o.cfg.logger; l != nil {
		l.LogAttrs(o.ctx, slog.LevelWarn, "idem: giving up",
			slog.String("method", o.req.Method),
			slog.String("url", o.req.URL.Redacted()),
			slog.String("key", o.key),
			slog.Int("attempts", rec.Attempts),
			slog.String("error", e.Error()))
	}
	return e
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

// Rewind readies the body of the next attempt, from GetBody when it has one.
func (o *operation) Rewind() error {
	var err error
	o.nextBody, err = o.body.next(o.req)
	return err
}

// Unsent closes the body readied for an attempt that will not be made: the
// caller's, when no attempt was.
func (o *operation) Unsent() {
	if o.attempts == 0 {
		o.body.close(o.req)
		return
	}
	closeBody(o.nextBody)
	o.nextBody = nil
}

// Release lets go of the latest response, draining its body until until at
// most, so that its connection can be reused.
func (o *operation) Release(until time.Time) {
	discard(o.resp, until)
}

// Answered is closed when a late attempt brings the answer.
func (o *operation) Answered() <-chan struct{} {
	if o.late == nil {
		return nil
	}
	return o.late.won
}

// Retrying reports the retry n to WithOnRetry.
func (o *operation) Retrying(n retry.Notice) {
	if o.cfg.onRetry == nil {
		return
	}
	o.cfg.onRetry(o.ctx, o.attemptInfo(n.Next))
}

// attemptInfo is the AttemptInfo of the attempt a.
func (o *operation) attemptInfo(a retry.Attempt) AttemptInfo { return attemptInfo(a, o.key) }

// attemptInfo is the AttemptInfo of the attempt a of an operation keyed key.
func attemptInfo(a retry.Attempt, key string) AttemptInfo {
	info := AttemptInfo{Number: a.Number, Reason: a.Reason, Wait: a.Wait, Poll: a.Poll, Key: key,
		Err: a.Prev.Err, RetryAfter: a.Prev.RetryAfter}
	if a.Prev.Class != retry.NoAnswer {
		info.Status = a.Prev.Code
	}
	return info
}

// closeBody closes the body of an attempt that will not be made.
func closeBody(b io.ReadCloser) {
	if b != nil {
		_ = b.Close()
	}
}

// waitLate waits until a late attempt answers, every late attempt has
// ended, the caller's context is done or the deadline passes.
func (o *operation) waitLate(deadline time.Time) {
	ctx, cancel := context.WithDeadline(o.ctx, deadline)
	defer cancel()
	o.late.waitAnswer(ctx.Done())
}

// settle decides what the operation returns once its loop has ended with resp
// and err (deadline is the operation's): a late attempt's final answer taken meanwhile wins over the loop's
// result, unless the loop ended because the caller's context did. What is not
// returned is let go.
func (o *operation) settle(resp *http.Response, err error, deadline time.Time) (*http.Response, error) {
	if o.late == nil {
		return resp, err
	}
	if resp == nil && err != nil && o.ctx.Err() == nil {
		// Giving up with attempts still going on: one of them may bring the
		// answer (a payment that went through). Wait for it, as long as the
		// deadline allows.
		o.waitLate(deadline)
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
