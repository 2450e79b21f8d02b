package idemotel_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	idemotel "github.com/idemkit/idem/otel"
)

// scripted is the server side of the client's tests, in memory: each
// attempt gets the next of its responses (the last one again when they run
// out), so that waits run on synctest's clock.
type scripted struct {
	mu       sync.Mutex
	statuses []int
	header   []http.Header
	reqs     []*http.Request
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := min(len(s.reqs), len(s.statuses)-1)
	s.reqs = append(s.reqs, req)
	h := http.Header{}
	if i < len(s.header) && s.header[i] != nil {
		h = s.header[i].Clone()
	}
	return &http.Response{StatusCode: s.statuses[i], Header: h, Body: io.NopCloser(strings.NewReader("{}")),
		Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// clientCase sends one keyed POST through an instrumented idem.Transport
// over next, under a caller's span, in a synctest bubble, and hands the
// test the telemetry, the caller's span and the response.
func clientCase(t *testing.T, next http.RoundTripper, idemOpts []idem.Option, check func(t *testing.T, tel *telemetry, parent trace.SpanContext, resp *http.Response, err error)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(t)
		c := idemotel.NewClient(idemotel.WithTracerProvider(tel.tp), idemotel.WithMeterProvider(tel.mp))
		rt := idem.NewTransport(c.Transport(next), append([]idem.Option{c.Option(), idem.WithBackoff(time.Second, time.Second)}, idemOpts...)...)
		ctx, parent := tel.tp.Tracer("caller").Start(context.Background(), "checkout")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://payments.test:8443/payments", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "order-9")
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		parent.End()
		check(t, tel, parent.SpanContext(), resp, err)
	})
}

// attemptSpans returns the attempt spans, in order, checking that each is a
// client span under parent.
func attemptSpans(t *testing.T, tel *telemetry, parent trace.SpanContext) []sdktrace.ReadOnlySpan {
	t.Helper()
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == "checkout" {
			continue
		}
		if s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanID() {
			t.Errorf("span %q (kind %v) is not a client span under the caller's", s.Name(), s.SpanKind())
		}
		out = append(out, s)
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) *attribute.Set {
	set := attribute.NewSet(s.Attributes()...)
	return &set
}

// value is the span's attribute k.
func value(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	return attrs(s).Value(k)
}

func TestClientFirstAttempt(t *testing.T) {
	t.Parallel()
	clientCase(t, &scripted{statuses: []int{201}}, nil, func(t *testing.T, tel *telemetry, parent trace.SpanContext, resp *http.Response, err error) {
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("RoundTrip: %v, %v", resp, err)
		}
		spans := attemptSpans(t, tel, parent)
		if len(spans) != 1 {
			t.Fatalf("%d attempt spans, want 1", len(spans))
		}
		a := attrs(spans[0])
		if a.HasValue("http.request.resend_count") || a.HasValue("idem.retry.reason") || a.HasValue("idem.key") {
			t.Errorf("first attempt's span has retry or key attributes: %v", a.Encoded(attribute.DefaultEncoder()))
		}
		for k, want := range map[attribute.Key]attribute.Value{
			"http.request.method": attribute.StringValue("POST"), "server.address": attribute.StringValue("payments.test"),
			"server.port": attribute.IntValue(8443), "http.response.status_code": attribute.IntValue(201),
		} {
			if v, _ := a.Value(k); v != want {
				t.Errorf("%s = %v, want %v", k, v.String(), want.String())
			}
		}
		ms := tel.metrics(t)
		if n, s := hist(t, ms, "idem.client.attempts", outcome("success")); n != 1 || s != 1 {
			t.Errorf("attempts: %d operations, %v attempts; want 1, 1", n, s)
		}
		if n, _ := hist(t, ms, "idem.client.operation.duration", outcome("success"), status(201),
			attribute.String("server.address", "payments.test")); n != 1 {
			t.Errorf("operations: %d, want 1", n)
		}
		if n := sum(t, ms, "idem.client.retries"); n != 0 {
			t.Errorf("retries: %d, want 0", n)
		}
		noKeyAttributes(t, ms)
	})
}

func TestClientRetryAfter503(t *testing.T) {
	t.Parallel()
	clientCase(t, &scripted{statuses: []int{503, 201}}, nil, func(t *testing.T, tel *telemetry, parent trace.SpanContext, resp *http.Response, err error) {
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("RoundTrip: %v, %v", resp, err)
		}
		spans := attemptSpans(t, tel, parent)
		if len(spans) != 2 {
			t.Fatalf("%d attempt spans, want 2", len(spans))
		}
		if spans[0].Status().Code.String() != "Error" {
			t.Errorf("the 503 attempt's span status is %v, want Error", spans[0].Status())
		}
		a := attrs(spans[1])
		for k, want := range map[attribute.Key]attribute.Value{
			"http.request.resend_count": attribute.IntValue(1), "idem.retry.reason": attribute.StringValue("status"),
			"idem.poll": attribute.BoolValue(false), "http.response.status_code": attribute.IntValue(201),
		} {
			if v, _ := a.Value(k); v != want {
				t.Errorf("retry span: %s = %v, want %v", k, v.String(), want.String())
			}
		}
		if v, _ := a.Value("idem.retry.wait"); v.AsFloat64() <= 0 {
			t.Errorf("retry span: idem.retry.wait = %v, want the backoff", v.String())
		}
		ms := tel.metrics(t)
		if n := sum(t, ms, "idem.client.retries", attribute.String("idem.retry.reason", "status")); n != 1 {
			t.Errorf("retries by status: %d, want 1", n)
		}
		if n, s := hist(t, ms, "idem.client.attempts", outcome("success")); n != 1 || s != 2 {
			t.Errorf("attempts: %d operations, %v attempts; want 1, 2", n, s)
		}
	})
}

func TestClientPollAfter409(t *testing.T) {
	t.Parallel()
	next := &scripted{statuses: []int{409, 201}, header: []http.Header{{"Retry-After": {"1"}}, {"Idempotent-Replayed": {"true"}}}}
	clientCase(t, next, nil, func(t *testing.T, tel *telemetry, parent trace.SpanContext, resp *http.Response, err error) {
		if err != nil || resp.StatusCode != 201 || !idem.Replayed(resp) {
			t.Fatalf("RoundTrip: %v, %v; want the replayed 201", resp, err)
		}
		spans := attemptSpans(t, tel, parent)
		if len(spans) != 2 {
			t.Fatalf("%d attempt spans, want 2", len(spans))
		}
		a := attrs(spans[1])
		for k, want := range map[attribute.Key]attribute.Value{
			"http.request.resend_count": attribute.IntValue(1), "idem.retry.reason": attribute.StringValue("in-progress"),
			"idem.poll": attribute.BoolValue(true),
		} {
			if v, _ := a.Value(k); v != want {
				t.Errorf("poll span: %s = %v, want %v", k, v.String(), want.String())
			}
		}
		ms := tel.metrics(t)
		if n := sum(t, ms, "idem.client.polls"); n != 1 {
			t.Errorf("polls: %d, want 1", n)
		}
		if n := sum(t, ms, "idem.client.retries", attribute.String("idem.retry.reason", "in-progress")); n != 1 {
			t.Errorf("retries in progress: %d, want 1", n)
		}
	})
}

func TestClientBudgetRefusal(t *testing.T) {
	t.Parallel()
	budget := idem.NewBudget(0, 0)
	clientCase(t, &scripted{statuses: []int{503, 201}}, []idem.Option{idem.WithRetryBudget(budget)},
		func(t *testing.T, tel *telemetry, parent trace.SpanContext, resp *http.Response, err error) {
			if err == nil && resp.StatusCode != 503 {
				t.Fatalf("RoundTrip: %v, %v; want the 503 or an error, the retry refused", resp, err)
			}
			if spans := attemptSpans(t, tel, parent); len(spans) != 1 {
				t.Fatalf("%d attempt spans, want 1", len(spans))
			}
			ms := tel.metrics(t)
			if n := sum(t, ms, "idem.client.budget.refusals", attribute.String("server.address", "payments.test")); n != 1 {
				t.Errorf("budget refusals: %d, want 1", n)
			}
			if n, _ := hist(t, ms, "idem.client.operation.duration", outcome("budget")); n != 1 {
				t.Errorf("operations ended by the budget: %d, want 1", n)
			}
			if n := sum(t, ms, "idem.client.retries"); n != 0 {
				t.Errorf("retries: %d, want 0", n)
			}
		})
}

// TestClientKeyAttribute: with WithKeyAttribute the attempt spans carry the
// key; the metrics never do.
func TestClientKeyAttribute(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	c := idemotel.NewClient(idemotel.WithTracerProvider(tel.tp), idemotel.WithMeterProvider(tel.mp), idemotel.WithKeyAttribute())
	rt := idem.NewTransport(c.Transport(&scripted{statuses: []int{201}}), c.Option())
	req, _ := http.NewRequest(http.MethodPost, "http://h.test/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "order-3")
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	spans := tel.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	if v, ok := value(spans[0], "idem.key"); !ok || v.AsString() != "order-3" {
		t.Errorf("idem.key = %q (present %v), want order-3", v.AsString(), ok)
	}
	noKeyAttributes(t, tel.metrics(t))
}

// TestClientTransportError: an attempt that fails records the error on its
// span.
func TestClientTransportError(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	c := idemotel.NewClient(idemotel.WithTracerProvider(tel.tp), idemotel.WithMeterProvider(tel.mp))
	failing := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection reset") })
	req, _ := http.NewRequest(http.MethodGet, "http://h.test/x", nil)
	if _, err := c.Transport(failing).RoundTrip(req); err == nil {
		t.Fatal("no error")
	}
	spans := tel.spans.Ended()
	if len(spans) != 1 || spans[0].Status().Code.String() != "Error" {
		t.Fatalf("spans %v, want one with status Error", spans)
	}
	if v, _ := value(spans[0], "error.type"); v.AsString() != "_OTHER" {
		t.Errorf("error.type = %q, want _OTHER", v.AsString())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestClientQuotaSkipped: with the default retry quota spent, a retry turn
// it cannot pay for is skipped and counted; the operation still completes
// when a later turn is paid (the quota earns a unit every 200ms).
func TestClientQuotaSkipped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(t)
		c := idemotel.NewClient(idemotel.WithTracerProvider(tel.tp), idemotel.WithMeterProvider(tel.mp))
		// Spend the quota: 101 operations of one retry each, every attempt 503.
		rt := idem.NewTransport(c.Transport(&scripted{statuses: []int{503}}), c.Option(),
			idem.WithBackoff(time.Millisecond, time.Millisecond), idem.WithJitter(idem.NoJitter), idem.WithMaxAttempts(2))
		for range 101 {
			req, _ := http.NewRequest(http.MethodGet, "http://payments.test/status", nil)
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}
		ms := tel.metrics(t)
		// 100 retries paid; the 101st operation's turn (1ms later, not a
		// unit earned) skipped.
		if n := sum(t, ms, "idem.client.quota.skipped", attribute.String("server.address", "payments.test")); n != 1 {
			t.Errorf("skipped turns: %d, want 1", n)
		}
		if n := sum(t, ms, "idem.client.retries"); n != 100 {
			t.Errorf("retries: %d, want the quota's 100", n)
		}
		if n := sum(t, ms, "idem.client.budget.refusals"); n != 1 {
			t.Errorf("refusals: %d, want 1", n)
		}
	})
}
