package idemotel

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/server"
)

// Values of the idem.outcome attribute of the server's metrics and spans.
const (
	ServerExecuted         = "executed"          // the handler ran for this request
	ServerReplayed         = "replayed"          // the recorded response was replayed
	ServerMismatch         = "mismatch"          // 422: the key was used for another request
	ServerInProgress       = "in-progress"       // 409: the first request with the key still runs
	ServerOutcomeUnknown   = "outcome-unknown"   // 500: a run's response could not be recorded
	ServerStoreUnavailable = "store-unavailable" // 503: the store failed before the handler ran
	ServerRejected         = "rejected"          // 4xx before the store: no or bad key, no scope, body too large or unreadable
)

// Values of the idem.wait.end attribute of idem.server.wait.duration: how a
// duplicate's time in the store ended.
const (
	WaitReplayed   = "replayed"    // the first request finished: its response was replayed
	WaitInProgress = "in-progress" // the wait was over (or zero) and the first still ran: 409
	WaitCanceled   = "canceled"    // the client went away while waiting: 409, sent to no one
	WaitExecuted   = "executed"    // the first released the key (5xx, panic): this one ran the handler
)

// Values of the idem.store.error attribute of idem.server.store.errors.
const (
	StoreErrorUnavailable = "unavailable"  // before the handler ran: answered 503, safe to retry
	StoreErrorNotRecorded = "not-recorded" // after the handler ran: answered outcome-unknown
)

// Attribute keys of this package, besides the semantic conventions' ones.
const (
	attrOutcome    = attribute.Key("idem.outcome")
	attrProblem    = attribute.Key("idem.problem")
	attrStore      = attribute.Key("idem.store")
	attrStoreError = attribute.Key("idem.store.error")
	attrWaitEnd    = attribute.Key("idem.wait.end")
	attrStored     = attribute.Key("idem.stored")
	attrKey        = attribute.Key("idem.key")
	attrHandler    = attribute.Key("idem.handler.duration")
	attrStoreTime  = attribute.Key("idem.store.duration")
	attrWaited     = attribute.Key("idem.wait.duration")
)

// Semantic-convention attribute keys (HTTP, stable).
const (
	attrRoute  = attribute.Key("http.route")
	attrMethod = attribute.Key("http.request.method")
	attrStatus = attribute.Key("http.response.status_code")
)

// durationBuckets are the semantic conventions' advice for HTTP durations,
// in seconds.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Server returns the option that instruments server.Middleware: pass it with
// the middleware's other options. It is server.WithOnOutcome(OnOutcome(opts...)),
// so it replaces another WithOnOutcome hook; call OnOutcome from your own hook
// to have both. It panics on an impossible option.
func Server(opts ...Option) server.Option {
	return server.WithOnOutcome(OnOutcome(opts...))
}

// OnOutcome returns a server.WithOnOutcome hook that records each protected
// request in these metrics, with the attributes http.route, idem.store (see
// WithStoreName) and http.request.method. None comes from what a caller
// sends: the route is the pattern that matched (WithRoute), the method the
// conventions' name or "_OTHER", and never the key, the scope, the Host or
// the path:
//
//	idem.server.requests          counter, {request}: every protected request, by
//	                              idem.outcome (the Server* values) and
//	                              http.response.status_code, with idem.problem
//	                              (the docs/problems.md section) on a problem answer
//	idem.server.store.errors      counter, {error}: store failures, by idem.store.error
//	                              (StoreErrorUnavailable, StoreErrorNotRecorded)
//	idem.server.wait.duration     histogram, s: how long a duplicate (a replay, a 409,
//	                              or an execution after a wait: OutcomeEvent.Waited
//	                              not zero) spent in the store, its wait for the first
//	                              request included, by idem.wait.end (the Wait* values)
//	idem.server.handler.duration  histogram, s: how long the handler ran, by
//	                              http.response.status_code
//
// On the request's span (the one in its context, such as otelhttp's), when it
// is recording, it sets idem.outcome and adds an "idem.server" event saying
// what the middleware did; a store failure is recorded as the span's error.
func OnOutcome(opts ...Option) func(server.OutcomeEvent) {
	c := newConfig(opts)
	m := c.mp.Meter(ScopeName)
	s := &serverHook{cfg: c}
	s.requests = must(m.Int64Counter("idem.server.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Protected requests, by how the idempotency middleware answered.")))
	s.storeErrors = must(m.Int64Counter("idem.server.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Errors of the idempotency store.")))
	s.wait = must(m.Float64Histogram("idem.server.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a duplicate request spent in the store, waiting for the first one included."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)))
	s.handler = must(m.Float64Histogram("idem.server.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the protected handler's runs."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)))
	return s.record
}

type serverHook struct {
	cfg         *config
	requests    metric.Int64Counter
	storeErrors metric.Int64Counter
	wait        metric.Float64Histogram
	handler     metric.Float64Histogram

	// The attribute sets of each instrument, built once per combination.
	requestSets attrCache[serverKey]
	errorSets   attrCache[serverKey]
	waitSets    attrCache[serverKey]
	handlerSets attrCache[serverKey]
}

// serverKey is a combination of the server's metric attributes; an
// instrument's cache uses the fields it records.
type serverKey struct {
	method, route, outcome, problem, detail string // detail: the store error or the wait's end
	status                                  int
}

// base is the attributes every server metric has: method, route and store.
func (s *serverHook) base(k serverKey, extra int) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3+extra)
	attrs = append(attrs, attrMethod.String(k.method))
	if k.route != "" {
		attrs = append(attrs, attrRoute.String(k.route))
	}
	if s.cfg.store != "" {
		attrs = append(attrs, attrStore.String(s.cfg.store))
	}
	return attrs
}

func (s *serverHook) requestAttrs(k serverKey) []attribute.KeyValue {
	attrs := append(s.base(k, 3), attrOutcome.String(k.outcome), attrStatus.Int(k.status))
	if k.problem != "" {
		attrs = append(attrs, attrProblem.String(k.problem))
	}
	return attrs
}

func (s *serverHook) errorAttrs(k serverKey) []attribute.KeyValue {
	return append(s.base(k, 1), attrStoreError.String(k.detail))
}

func (s *serverHook) waitAttrs(k serverKey) []attribute.KeyValue {
	return append(s.base(k, 1), attrWaitEnd.String(k.detail))
}

func (s *serverHook) handlerAttrs(k serverKey) []attribute.KeyValue {
	return append(s.base(k, 1), attrStatus.Int(k.status))
}

func (s *serverHook) record(ev server.OutcomeEvent) {
	r := ev.Request
	ctx := context.Background()
	var k serverKey
	if r != nil {
		ctx = r.Context()
		k.method, k.route = method(r.Method), s.cfg.route(r)
	}
	outcome := serverOutcome(ev)
	problem := strings.TrimPrefix(ev.Problem, server.ProblemBase)
	// An instrument that is not Enabled (the no-op one, or the global one
	// before an SDK is installed) is skipped before its attributes are
	// looked up.
	if s.requests.Enabled(ctx) {
		s.requests.Add(ctx, 1, s.requestSets.get(serverKey{method: k.method, route: k.route, outcome: outcome,
			problem: problem, status: ev.Status}, s.requestAttrs).add...)
	}

	storeErr := ""
	if ev.Err != nil && (ev.Problem == server.ProblemStoreUnavailable || ev.Problem == server.ProblemOutcomeUnknown) {
		storeErr = StoreErrorUnavailable
		if ev.Problem == server.ProblemOutcomeUnknown {
			storeErr = StoreErrorNotRecorded
		}
		if s.storeErrors.Enabled(ctx) {
			s.storeErrors.Add(ctx, 1, s.errorSets.get(serverKey{method: k.method, route: k.route, detail: storeErr}, s.errorAttrs).add...)
		}
	}
	end := waitEnd(ctx, ev)
	if end != "" && s.wait.Enabled(ctx) {
		s.wait.Record(ctx, ev.StoreDuration.Seconds(),
			s.waitSets.get(serverKey{method: k.method, route: k.route, detail: end}, s.waitAttrs).rec...)
	}
	if ev.HandlerDuration > 0 && s.handler.Enabled(ctx) {
		s.handler.Record(ctx, ev.HandlerDuration.Seconds(),
			s.handlerSets.get(serverKey{method: k.method, route: k.route, status: ev.Status}, s.handlerAttrs).rec...)
	}

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	status := attrStatus.Int(ev.Status)
	span.SetAttributes(attrOutcome.String(outcome))
	if k.route != "" {
		span.SetAttributes(attrRoute.String(k.route))
	}
	evAttrs := []attribute.KeyValue{attrOutcome.String(outcome), status, attrStored.Bool(ev.Stored),
		attrStoreTime.Float64(ev.StoreDuration.Seconds())}
	if problem != "" {
		evAttrs = append(evAttrs, attrProblem.String(problem))
	}
	if s.cfg.store != "" {
		evAttrs = append(evAttrs, attrStore.String(s.cfg.store))
	}
	if ev.HandlerDuration > 0 {
		evAttrs = append(evAttrs, attrHandler.Float64(ev.HandlerDuration.Seconds()))
	}
	if end != "" {
		evAttrs = append(evAttrs, attrWaitEnd.String(end))
	}
	if ev.Waited > 0 {
		evAttrs = append(evAttrs, attrWaited.Float64(ev.Waited.Seconds()))
	}
	if s.cfg.key && ev.Key != "" {
		span.SetAttributes(attrKey.String(ev.Key))
	}
	span.AddEvent("idem.server", trace.WithAttributes(evAttrs...))
	if storeErr != "" {
		span.RecordError(ev.Err, trace.WithAttributes(attrStoreError.String(storeErr)))
		span.SetStatus(codes.Error, "idempotency store: "+storeErr)
	}
}

// serverOutcome is the idem.outcome value of ev.
func serverOutcome(ev server.OutcomeEvent) string {
	switch {
	case ev.Problem == server.ProblemStoreUnavailable:
		return ServerStoreUnavailable
	case ev.Outcome == server.OutcomeExecuted:
		return ServerExecuted
	case ev.Outcome == server.OutcomeReplayed:
		return ServerReplayed
	case ev.Outcome == server.OutcomeMismatch:
		return ServerMismatch
	case ev.Outcome == server.OutcomeInProgress:
		return ServerInProgress
	case ev.Outcome == server.OutcomeUnknown:
		return ServerOutcomeUnknown
	}
	return ServerRejected
}

// waitEnd is the idem.wait.end value of a duplicate's answer, "" for any
// other answer. An execution is a duplicate's when the store waited for
// another request with the key before it ran.
func waitEnd(ctx context.Context, ev server.OutcomeEvent) string {
	switch ev.Outcome {
	case server.OutcomeExecuted:
		if ev.Waited > 0 {
			return WaitExecuted
		}
	case server.OutcomeReplayed:
		return WaitReplayed
	case server.OutcomeInProgress:
		if errors.Is(ctx.Err(), context.Canceled) {
			return WaitCanceled
		}
		return WaitInProgress
	}
	return ""
}

// method is the http.request.method value: the method when the conventions
// know it, else "_OTHER" (a client chooses the method: unbounded).
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// must returns the instrument a meter made, passing its error, if any, to
// the global error handler (otel.Handle): a meter that cannot make an
// instrument still returns one that works, so telemetry never stops a request.
func must[T any](v T, err error) T {
	if err != nil {
		otel.Handle(err)
	}
	return v
}
