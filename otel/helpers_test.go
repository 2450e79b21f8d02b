package idemotel_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// telemetry is an SDK TracerProvider and MeterProvider that keep everything in
// memory for a test to read.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel := &telemetry{
		spans:  spans,
		tp:     sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		reader: reader,
		mp:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	}
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

// serverSpans wraps h so that each request has a recording server span, as
// otelhttp's handler gives it.
func (tel *telemetry) serverSpans(h http.Handler) http.Handler {
	tracer := tel.tp.Tracer("test")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), r.Method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// metrics collects what was recorded so far.
func (tel *telemetry) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// has reports whether set holds every attribute of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum adds up the counter name's points that have the attributes want.
func sum(t *testing.T, ms map[string]metricdata.Aggregation, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	agg, ok := ms[name]
	if !ok {
		return 0
	}
	s, ok := agg.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, agg)
	}
	var n int64
	for _, p := range s.DataPoints {
		if has(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// hist returns the count and sum of the histogram name's points that have
// the attributes want.
func hist(t *testing.T, ms map[string]metricdata.Aggregation, name string, want ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	agg, ok := ms[name]
	if !ok {
		return 0, 0
	}
	var n uint64
	var total float64
	switch h := agg.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			if has(p.Attributes, want) {
				n, total = n+p.Count, total+p.Sum
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			if has(p.Attributes, want) {
				n, total = n+p.Count, total+float64(p.Sum)
			}
		}
	default:
		t.Fatalf("%s is a %T, want a histogram", name, agg)
	}
	return n, total
}

// noKeyAttributes fails the test when a metric point carries a key or scope.
func noKeyAttributes(t *testing.T, ms map[string]metricdata.Aggregation) {
	t.Helper()
	bad := []attribute.Key{"idem.key", "idem.scope"}
	check := func(name string, set attribute.Set) {
		for _, k := range bad {
			if set.HasValue(k) {
				t.Errorf("%s has a %s attribute", name, k)
			}
		}
	}
	for name, agg := range ms {
		switch a := agg.(type) {
		case metricdata.Sum[int64]:
			for _, p := range a.DataPoints {
				check(name, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range a.DataPoints {
				check(name, p.Attributes)
			}
		case metricdata.Histogram[int64]:
			for _, p := range a.DataPoints {
				check(name, p.Attributes)
			}
		}
	}
}

// event returns the attributes of the span event name on span, if any.
func event(span sdktrace.ReadOnlySpan, name string) (attribute.Set, bool) {
	i := slices.IndexFunc(span.Events(), func(e sdktrace.Event) bool { return e.Name == name })
	if i < 0 {
		return attribute.Set{}, false
	}
	return attribute.NewSet(span.Events()[i].Attributes...), true
}
