package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/clientlink"
	"github.com/idemkit/idem/internal/keyformat"
	"github.com/idemkit/idem/internal/retry"
)

// UnaryClientInterceptor returns the client side of idem for unary calls:
// each call is one logical operation with one idempotency key (metadata
// MetadataKey), sent by every attempt, retried by idem's retry engine under
// the policy opts make, the options of the HTTP Transport (idem.WithMaxAttempts,
// idem.WithMaxElapsed, idem.WithRetryBudget, idem.WithOnRetry, idem.WithOnDone,
// ...), with the same defaults. docs/grpc.md says what it retries and why;
// in short:
//
//   - A call's key is the caller's (an idempotency-key in the outgoing
//     metadata, or idem.ContextWithKey's), else, with idem.WithAutoKeys on
//     (the default), a generated one, for every method whose registered
//     descriptor does not say idempotency_level IDEMPOTENT or
//     NO_SIDE_EFFECTS (a method that is not registered is taken as neither).
//   - Retried: Unavailable; ResourceExhausted with a pushback; Internal,
//     Unknown and DeadlineExceeded answered by the server (a 500 or 504 over
//     HTTP); Aborted carrying idem's in-progress reason, for a keyed call;
//     an attempt cut by idem.WithAttemptTimeout. Never the codes that say
//     the request is wrong (InvalidArgument, FailedPrecondition,
//     PermissionDenied, Unauthenticated, NotFound, AlreadyExists, OutOfRange,
//     Unimplemented, ...), and nothing for an unkeyed call to a method that
//     is not IDEMPOTENT or NO_SIDE_EFFECTS.
//   - The wait is the full-jitter backoff, or the server's pushback (gRFC
//     A6's grpc-retry-pushback-ms, else a google.rpc.RetryInfo), at most
//     idem.WithMaxRetryAfter; a negative or malformed pushback means no
//     retry. The cap (idem.WithMaxElapsed) and the call's deadline bound
//     every wait and attempt.
//
// The call gets the latest attempt's answer as grpc-go returned it, or an
// *Error when there is none to return. idem.WithRetryIf's predicate is
// called with a nil response and the attempt's error (nil for OK);
// idem.WithBodyBufferLimit and idem.WithQuotedKeys do not apply. Put it
// first (outermost) among the client's unary interceptors, so that every
// attempt passes through the others, and turn grpc-go's own retries off
// (grpc.WithDisableRetry) so that one layer retries. It panics on a nil
// Option.
func UnaryClientInterceptor(opts ...idem.Option) grpc.UnaryClientInterceptor {
	c := &client{policy: clientlink.Resolve("UnaryClientInterceptor", opts), rand: rand.Float64}
	return c.intercept
}

// client is the interceptor's immutable state.
type client struct {
	policy  clientlink.Policy
	methods methods
	rand    func() float64
}

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	m := c.methods.lookup(method)
	ctx, key, generated, err := c.key(ctx, m.repeatable)
	if err != nil {
		e := &Error{Key: key, Cause: err}
		if c.policy.Done != nil {
			c.policy.Done(ctx, clientlink.Done{Method: method, Host: target(cc), Key: key, Start: time.Now(),
				Err: e, Stop: retry.StopInvalidKey})
		}
		return e
	}
	k := &call{ctx: ctx, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts,
		key: key, policy: &c.policy}
	return k.run(m.repeatable, generated, c.rand)
}

// target is the name of the connection's target, for the Report's Host.
func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// key returns the call's key and ctx with it in the outgoing metadata: the
// metadata's own, else idem.ContextWithKey's, else a generated one for a
// method that is not repeatable; "" for an unkeyed call.
func (c *client) key(ctx context.Context, repeatable bool) (_ context.Context, key string, generated bool, err error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	switch vs := md.Get(MetadataKey); len(vs) {
	case 0:
	case 1:
		return ctx, vs[0], false, checkKey("metadata", vs[0])
	default:
		return ctx, "", false, fmt.Errorf("%w from the metadata: %d values (one is allowed)", idem.ErrInvalidKey, len(vs))
	}
	source := "context"
	key, ok := clientlink.KeyFromContext(ctx)
	if !ok {
		if !c.policy.AutoKeys || repeatable {
			return ctx, "", false, nil
		}
		source, key, generated = "generator", c.policy.NewKey(), true
	}
	if err := checkKey(source, key); err != nil {
		return ctx, key, false, err
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, key), key, generated, nil
}

// checkKey reports a key that the server would refuse, from source.
func checkKey(source, key string) error {
	if err := keyformat.Check(key, keyformat.MaxLen); err != nil {
		return fmt.Errorf("%w from the %s: %v", idem.ErrInvalidKey, source, err)
	}
	return nil
}

// call is one logical call under way, the engine's driver: it makes the
// attempts the engine asks for and holds the latest one's error.
type call struct {
	ctx     context.Context // the caller's, with the key in the outgoing metadata
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption
	key     string
	policy  *clientlink.Policy

	err error // the latest attempt's
}

var _ retry.Driver = (*call)(nil)

// run has the engine carry the call out and returns what the caller gets.
func (k *call) run(repeatable, generated bool, rnd func() float64) error {
	p := k.policy
	start := time.Now()
	plan := retry.Plan{
		Start: start, FirstAt: start, Bounds: p.Bounds, Backoff: p.Backoff, Limit: p.Limit, Host: target(k.cc), Rand: rnd,
		Request: retry.Request{Keyed: k.key != "", FreshKey: generated, Repeatable: repeatable, Replayable: true},
	}
	if p.Logger != nil {
		plan.Logger, plan.LogAttrs = p.Logger, k.logAttrs
	}
	var op retry.Op
	op.Init(k.ctx, plan, k)
	r := op.Run()
	rec := op.Record()
	err, stop := k.err, rec.Stop
	if r.Answer {
		op.Settle(op.Last())
		if stop == retry.StopFinalStatus || stop == "" {
			stop = retry.StopSuccess
			if err != nil {
				stop = retry.StopFinalStatus
			}
		}
	} else {
		err = &Error{Attempts: rec.Attempts, Key: k.key, Cause: r.Cause, Last: k.err, detail: r.Detail,
			deadline: rec.Stop == retry.StopDeadline}
	}
	if p.Logger != nil && (!r.Answer || stop != retry.StopSuccess && stop != retry.StopFinalStatus) {
		p.Logger.LogAttrs(k.ctx, slog.LevelWarn, "idem: giving up", append(k.logAttrs(),
			slog.Int("attempts", rec.Attempts), slog.String("stop", stop), slog.String("error", errString(err)))...)
	}
	if p.Done != nil {
		p.Done(k.ctx, clientlink.Done{Method: k.method, Host: target(k.cc), Key: k.key, Record: rec,
			Start: op.Start(), Err: err, Stop: stop})
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// logAttrs returns the attributes every log line of the call has.
func (k *call) logAttrs() []slog.Attr {
	return []slog.Attr{slog.String("method", k.method), slog.String("target", target(k.cc)), slog.String("key", k.key)}
}

// Attempt makes one attempt, under the attempt's own bound when the engine
// sets one, and returns what it came to.
func (k *call) Attempt(a retry.Attempt) (retry.Outcome, bool) {
	ctx := k.policy.AttemptContext(k.ctx, a, k.key)
	cancel := context.CancelFunc(func() {})
	if a.Bound > 0 {
		ctx, cancel = context.WithTimeout(ctx, a.Bound)
	}
	var trailer metadata.MD
	opts := append(k.opts[:len(k.opts):len(k.opts)], grpc.Trailer(&trailer))
	err := k.invoker(ctx, k.method, k.req, k.reply, k.cc, opts...)
	cut := err != nil && k.ctx.Err() == nil && (errors.Is(ctx.Err(), context.DeadlineExceeded) || a.Bound > 0 && boundPassed(ctx, k.ctx))
	cancel()
	k.err = err
	out := outcomeOf(err, trailer, k.key != "", cut, k.ctx.Err() != nil)
	if k.policy.Judge != nil && out.Class != retry.NoAnswer || k.policy.Judge != nil && cut {
		never := out.Custom < 0
		out = k.policy.Judge(err, k.key != "", a.Fresh, out)
		if never {
			out.Custom = -1
		}
	}
	return out, false
}

// boundPassed reports whether the attempt's own deadline (attempt's, set by
// its bound and earlier than the caller's) has passed, whether or not its
// timer has run yet: the server was sent that deadline and may answer
// DeadlineExceeded for it before the client's timer fires (on a loaded
// machine, by milliseconds), and the attempt was then cut by its bound all
// the same.
func boundPassed(attempt, caller context.Context) bool {
	d, _ := attempt.Deadline()
	if cd, ok := caller.Deadline(); ok && !d.Before(cd) {
		return false // the caller's deadline, not the bound's
	}
	return !time.Now().Before(d)
}

// outcomeOf is the retry table of docs/CONTRACT.md §3, over gRPC: what an
// attempt that ended with err (nil for OK) and trailer came to, as the engine
// sees it. cut: the attempt's own bound ended it; callerDone: the caller's
// context has ended.
func outcomeOf(err error, trailer metadata.MD, keyed, cut, callerDone bool) retry.Outcome {
	if err == nil {
		return retry.Outcome{Class: retry.Final}
	}
	st, _ := status.FromError(err)
	out := retry.Outcome{Class: retry.Final, Code: int(st.Code()), Err: err}
	switch {
	case callerDone:
		out.Class = retry.NoAnswer
		return out
	case cut:
		out.Class, out.TimedOut = retry.NoAnswer, true
		return out
	}
	wait, has, never := pushback(st, trailer)
	switch st.Code() {
	case codes.Unavailable:
		out.Class, out.Holds = retry.Failing, true
	case codes.ResourceExhausted:
		// A quota that says when it refills; without that, a limit (a
		// message too large) that a repeat meets again.
		if has {
			out.Class, out.Holds = retry.Failing, true
		}
	case codes.Internal, codes.Unknown:
		if reason(st) != ReasonOutcomeUnknown {
			out.Class = retry.Failing
		}
	case codes.DeadlineExceeded:
		out.Class = retry.Failing // a server's or a proxy's time-out: the call's own deadline is callerDone
	case codes.Aborted:
		if keyed && reason(st) == ReasonInProgress {
			out.Class = retry.InProgress
		}
	}
	if has {
		out.RetryAfter, out.HasRetryAfter = wait, true
	}
	if never {
		out.Custom = -1
	}
	return out
}

// Rewind has nothing to do: grpc-go encodes the request message anew on
// every attempt.
func (k *call) Rewind() error { return nil }

// Unsent has nothing to let go.
func (k *call) Unsent() {}

// Release has nothing to let go: a unary answer is read whole.
func (k *call) Release(time.Time) {}

// Answered is nil: an attempt cut by its time-out is cancelled, never late.
func (k *call) Answered() <-chan struct{} { return nil }

// Retrying reports the retry n to idem.WithOnRetry.
func (k *call) Retrying(n retry.Notice) {
	if k.policy.Retrying != nil {
		k.policy.Retrying(k.ctx, n, k.key)
	}
}
