package idemotel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
)

// Client attribute keys, besides the semantic conventions' ones.
const (
	attrResendCount = attribute.Key("http.request.resend_count")
	attrAddress     = attribute.Key("server.address")
	attrPort        = attribute.Key("server.port")
	attrErrorType   = attribute.Key("error.type")
	attrReason      = attribute.Key("idem.retry.reason")
	attrWait        = attribute.Key("idem.retry.wait")
	attrPoll        = attribute.Key("idem.poll")
	attrAttempt     = attribute.Key("idem.attempt")
)

// spanKindClient is the start option of every attempt's span, made once.
var spanKindClient = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// attemptBuckets bound the attempts-per-operation histogram.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20}

// A Client instruments an idem.Transport. It has two parts, and both are
// needed: Transport wraps the RoundTripper the idem.Transport sends each
// attempt through (a span per attempt, the attempt counters), and Option is
// the idem.Transport's option that records each operation when it ends:
//
//	c := idemotel.NewClient()
//	t := idem.NewTransport(c.Transport(http.DefaultTransport), c.Option(), idem.WithMaxAttempts(4))
//
// Each attempt's span is a client span named for the method, under the
// caller's span (the request's context), with http.request.method,
// server.address, server.port and http.response.status_code; every attempt
// after the first has http.request.resend_count (1 for the first retry, as the
// conventions count), idem.retry.reason (the idem.AttemptInfo.Reason values),
// idem.retry.wait (seconds waited before it) and idem.poll (true for a poll
// after a keyed 409). The span carries the key (idem.key) only with
// WithKeyAttribute. The span ends when the attempt's response headers arrive
// (or its error); the global propagator (otel.SetTextMapPropagator) injects
// the span's context into the attempt's headers.
//
// Metrics, by http.request.method and server.address:
//
//	idem.client.operation.duration  histogram, s: each operation (one RoundTrip of
//	                                the idem.Transport), by idem.outcome (the
//	                                idem.Report.Stop values) and http.response.status_code
//	idem.client.attempts            histogram, {attempt}: attempts per operation, by idem.outcome
//	idem.client.retries             counter, {retry}: attempts after the first, by idem.retry.reason
//	idem.client.polls               counter, {poll}: polls after a keyed 409 (also retries)
//	idem.client.budget.refusals     counter, {refusal}: operations whose retry the budget refused,
//	                                or the default retry quota could not pay for when it was decided
//	idem.client.quota.skipped       counter, {turn}: retry turns the default retry quota skipped
//	                                (nothing was sent; idem.Report.Skipped)
//	idem.client.host_hold.duration  histogram, s: how long an operation waited for a host hold
//	                                (held operations only)
//
// A Client is safe for concurrent use and may instrument several Transports.
type Client struct {
	cfg        *config
	tracer     trace.Tracer
	noopTracer bool // tracer is the no-op one: attempts need no span

	duration  metric.Float64Histogram
	attempts  metric.Int64Histogram
	retries   metric.Int64Counter
	polls     metric.Int64Counter
	refusals  metric.Int64Counter
	skipped   metric.Int64Counter
	hostHolds metric.Float64Histogram

	// The attribute sets of each instrument, built once per combination.
	durationSets attrCache[clientKey]
	attemptSets  attrCache[clientKey]
	hostSets     attrCache[clientKey] // refusals, host holds, polls
	retrySets    attrCache[clientKey]
}

// clientKey is a combination of the client's metric attributes; an
// instrument's cache uses the fields it records.
type clientKey struct {
	host, method, outcome, reason string
	status                        int
}

func hostMethodAttrs(k clientKey, extra int) []attribute.KeyValue {
	host := hostAttrs(k.host)
	return append(append(make([]attribute.KeyValue, 0, len(host)+1+extra), host...), attrMethod.String(k.method))
}

func durationAttrs(k clientKey) []attribute.KeyValue {
	attrs := append(hostMethodAttrs(k, 2), attrOutcome.String(k.outcome))
	if k.status != 0 {
		attrs = append(attrs, attrStatus.Int(k.status))
	}
	return attrs
}

func attemptAttrs(k clientKey) []attribute.KeyValue {
	return append(hostMethodAttrs(k, 1), attrOutcome.String(k.outcome))
}

func hostMethodOnly(k clientKey) []attribute.KeyValue { return hostMethodAttrs(k, 0) }

func retryAttrs(k clientKey) []attribute.KeyValue {
	return append(hostMethodAttrs(k, 1), attrReason.String(k.reason))
}

// NewClient returns a Client recording through the options' providers. It
// panics on an impossible option.
func NewClient(opts ...Option) *Client {
	cfg := newConfig(opts)
	m := cfg.mp.Meter(ScopeName)
	tracer := cfg.tp.Tracer(ScopeName)
	_, noopTracer := tracer.(tracenoop.Tracer)
	return &Client{
		cfg:        cfg,
		tracer:     tracer,
		noopTracer: noopTracer,
		duration: must(m.Float64Histogram("idem.client.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of idem operations, retries and waits included."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
		attempts: must(m.Int64Histogram("idem.client.attempts", metric.WithUnit("{attempt}"),
			metric.WithDescription("Attempts sent per operation, the first included."),
			metric.WithExplicitBucketBoundaries(attemptBuckets...))),
		retries: must(m.Int64Counter("idem.client.retries", metric.WithUnit("{retry}"),
			metric.WithDescription("Attempts after the first, by why the previous one was retried."))),
		polls: must(m.Int64Counter("idem.client.polls", metric.WithUnit("{poll}"),
			metric.WithDescription("Attempts that poll for the answer after a keyed 409."))),
		refusals: must(m.Int64Counter("idem.client.budget.refusals", metric.WithUnit("{refusal}"),
			metric.WithDescription("Operations whose retry the retry budget refused, or the default retry quota could not pay for when it was decided."))),
		skipped: must(m.Int64Counter("idem.client.quota.skipped", metric.WithUnit("{turn}"),
			metric.WithDescription("Retry turns the default retry quota could not pay for: waited out, nothing sent."))),
		hostHolds: must(m.Float64Histogram("idem.client.host_hold.duration", metric.WithUnit("s"),
			metric.WithDescription("Time an operation waited because its host was held back after a 429 or 503."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
	}
}

// Option returns the idem.Transport option (idem.WithOnDone) that records
// each operation's metrics.
func (c *Client) Option() idem.Option {
	if c.noopMeter() {
		// Nothing to record: leave the Transport without a WithOnDone
		// function, so that it builds no Report either.
		return nothing
	}
	return idem.WithOnDone(c.done)
}

// nothing is an option that changes nothing; as an idem.Option it is
// instantiated for the Transport's configuration.
func nothing[T any](T) {}

// noopMeter reports whether every instrument Option records with is the no-op
// one (a metric/noop MeterProvider's), which no later SDK can enable. The
// global instruments, before an SDK is installed, are not: they are checked
// per call, with Enabled.
func (c *Client) noopMeter() bool {
	_, d := c.duration.(metricnoop.Float64Histogram)
	_, a := c.attempts.(metricnoop.Int64Histogram)
	_, r := c.refusals.(metricnoop.Int64Counter)
	_, s := c.skipped.(metricnoop.Int64Counter)
	_, h := c.hostHolds.(metricnoop.Float64Histogram)
	return d && a && r && s && h
}

func (c *Client) done(ctx context.Context, r idem.Report) {
	// An instrument that is not Enabled (the no-op one, or the global one
	// before an SDK is installed) is skipped before its attributes are
	// looked up.
	k := clientKey{host: r.Host, method: method(r.Method), outcome: r.Stop, status: r.Status}
	if c.duration.Enabled(ctx) {
		c.duration.Record(ctx, r.Elapsed.Seconds(), c.durationSets.get(k, durationAttrs).rec...)
	}
	if c.attempts.Enabled(ctx) {
		c.attempts.Record(ctx, int64(r.Attempts),
			c.attemptSets.get(clientKey{host: k.host, method: k.method, outcome: k.outcome}, attemptAttrs).rec...)
	}
	hm := clientKey{host: k.host, method: k.method}
	if r.BudgetRefused && c.refusals.Enabled(ctx) {
		c.refusals.Add(ctx, 1, c.hostSets.get(hm, hostMethodOnly).add...)
	}
	if r.Skipped > 0 && c.skipped.Enabled(ctx) {
		c.skipped.Add(ctx, int64(r.Skipped), c.hostSets.get(hm, hostMethodOnly).add...)
	}
	if r.HostHold > 0 && c.hostHolds.Enabled(ctx) {
		c.hostHolds.Record(ctx, r.HostHold.Seconds(), c.hostSets.get(hm, hostMethodOnly).rec...)
	}
}

// Transport returns next (http.DefaultTransport when nil) wrapped so that
// each attempt the idem.Transport sends through it is a span and is counted.
// A request that carries no idem.AttemptInfo (sent outside an idem.Transport)
// gets its span without the retry attributes.
func (c *Client) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &attemptTransport{c: c, next: next}
}

type attemptTransport struct {
	c    *Client
	next http.RoundTripper
}

func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	ctx := req.Context()
	info, _ := idem.AttemptFromContext(ctx)
	m := method(req.Method)
	if info.Number > 1 {
		if c.retries.Enabled(ctx) {
			c.retries.Add(ctx, 1, c.retrySets.get(clientKey{host: req.URL.Host, method: m, reason: info.Reason}, retryAttrs).add...)
		}
		if info.Poll && c.polls.Enabled(ctx) {
			c.polls.Add(ctx, 1, c.hostSets.get(clientKey{host: req.URL.Host, method: m}, hostMethodOnly).add...)
		}
	}

	prop := otel.GetTextMapPropagator()
	inject := len(prop.Fields()) > 0
	if c.noopTracer && !inject {
		// The no-op tracer's span records nothing and, with nothing to
		// inject, would not reach the request: send it as it is.
		return t.next.RoundTrip(req)
	}
	ctx, span := c.tracer.Start(ctx, m, spanKindClient...)
	defer span.End()
	out := req
	if span.IsRecording() {
		attrs := append(hostAttrs(req.URL.Host), attrMethod.String(m))
		if info.Number > 0 {
			attrs = append(attrs, attrAttempt.Int(info.Number))
		}
		if info.Number > 1 {
			attrs = append(attrs, attrResendCount.Int(info.Number-1), attrReason.String(info.Reason),
				attrWait.Float64(info.Wait.Seconds()), attrPoll.Bool(info.Poll))
		}
		if c.cfg.key && info.Key != "" {
			attrs = append(attrs, attrKey.String(info.Key))
		}
		span.SetAttributes(attrs...)
		out = req.WithContext(ctx)
	}
	if inject {
		if out == req {
			out = req.WithContext(ctx)
		}
		out.Header = req.Header.Clone() // never modify the caller's request
		if out.Header == nil {
			out.Header = http.Header{}
		}
		prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	}
	resp, err := t.next.RoundTrip(out)
	if !span.IsRecording() {
		// Its attributes would be dropped: do not build them.
		return resp, err
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrErrorType.String(errorType(err)))
	case resp != nil:
		span.SetAttributes(attrStatus.Int(resp.StatusCode))
		if resp.StatusCode >= 400 {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attrErrorType.String(strconv.Itoa(resp.StatusCode)))
		}
	}
	return resp, err
}

// hostAttrs are server.address and server.port of a URL host.
func hostAttrs(hostport string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return []attribute.KeyValue{attrAddress.String(hostport)}
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return []attribute.KeyValue{attrAddress.String(host)}
	}
	return []attribute.KeyValue{attrAddress.String(host), attrPort.Int(p)}
}

// errorType is the error.type of a transport error: "timeout" for a
// deadline or a net.Error that says so, else "_OTHER", as the conventions
// allow when no better low-cardinality name is known.
func errorType(err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "_OTHER"
}
