package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	idemotel "github.com/idemkit/idem/otel"
	"github.com/idemkit/idem/server"
)

// serviceName is the default service.name of the server's telemetry
// (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it).
const serviceName = "idem-server"

// telemetry is the server's OpenTelemetry: metrics served in the Prometheus
// text format on /metrics (the OTel Prometheus exporter writes the
// middleware's and the pools' instruments into a client_golang registry that
// also holds the Go runtime and process collectors), and traces sent over
// OTLP/HTTP when the environment asks for it (see tracesFromEnv).
type telemetry struct {
	registry *prometheus.Registry
	mp       *sdkmetric.MeterProvider
	meter    metric.Meter
	tp       trace.TracerProvider
	shutdown []func(context.Context) error
}

// newTelemetry sets up the metrics and, when the environment asks for them
// (tracesFromEnv), the traces, configured by the OTEL_* variables the SDK
// documents. A bad setting is an error naming it.
func newTelemetry(ctx context.Context) (*telemetry, error) {
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(attribute.String("service.name", serviceName)))
	if err == nil {
		var env *resource.Resource
		env, err = resource.New(ctx, resource.WithFromEnv())
		if err == nil {
			res, err = resource.Merge(res, env)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	t := &telemetry{registry: reg, mp: mp, meter: mp.Meter(idemotel.ScopeName), tp: noop.NewTracerProvider(),
		shutdown: []func(context.Context) error{mp.Shutdown}}

	on, err := tracesFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	if on {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP traces: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.tp = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}
	return t, nil
}

// tracesFromEnv reports whether traces are exported: OTEL_TRACES_EXPORTER=otlp,
// or, when it is unset, an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). "none" or nothing set: no traces.
// The exporter itself reads the other OTEL_EXPORTER_OTLP_* variables, and the
// SDK OTEL_TRACES_SAMPLER and OTEL_BSP_*.
func tracesFromEnv(getenv func(string) string) (bool, error) {
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: idem-server exports traces with otlp or none", v)
	}
}

// middlewareOptions instruments the idempotency middleware.
func (t *telemetry) middlewareOptions(store string) []server.Option {
	return []server.Option{idemotel.Server(idemotel.WithMeterProvider(t.mp), idemotel.WithTracerProvider(t.tp),
		idemotel.WithStoreName(store))}
}

// handler serves the metrics at GET path (and HEAD) and passes every other
// request to h, as it came (no path cleaning: the gateway forwards paths
// untouched), in a server span (otelhttp, with the W3C propagators; exported
// only when traces are on) that also records the conventions' http.server.*
// metrics.
func (t *telemetry) handler(h http.Handler, path string) http.Handler {
	h = otelhttp.NewHandler(h, "idem-server", otelhttp.WithTracerProvider(t.tp), otelhttp.WithMeterProvider(t.mp),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
	metrics := promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			metrics.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// closeAfter returns closeStores followed by the exporters' flush and stop,
// bounded by cancelGrace; a failure is logged.
func (t *telemetry) closeAfter(closeStores func(), logger *slog.Logger) func() {
	return func() {
		closeStores()
		ctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		if err := t.close(ctx); err != nil {
			logger.Warn("telemetry: flushing the exporters", "err", err)
		}
	}
}

// close flushes and stops the exporters.
func (t *telemetry) close(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// Attributes of the connection pool metrics (the database client semantic
// conventions).
var (
	attrPoolName = attribute.Key("db.client.connection.pool.name")
	attrState    = attribute.Key("db.client.connection.state")
	attrSystem   = attribute.Key("db.system.name")
)

// observePostgres reports pool's statistics as the conventions'
// db.client.connection.* metrics, with pool name name.
func (t *telemetry) observePostgres(name string, pool *pgxpool.Pool) {
	t.observePool(name, "postgresql", func() poolStats {
		s := pool.Stat()
		return poolStats{idle: int64(s.IdleConns()), used: int64(s.AcquiredConns()) + int64(s.ConstructingConns()),
			max: int64(s.MaxConns()), timeouts: s.CanceledAcquireCount(), pending: -1}
	})
}

// observeRedis reports rdb's pool statistics (every node's, for a Cluster).
func (t *telemetry) observeRedis(name string, rdb redis.UniversalClient) {
	t.observePool(name, "redis", func() poolStats {
		s := rdb.PoolStats()
		return poolStats{idle: int64(s.IdleConns), used: int64(s.TotalConns) - int64(s.IdleConns), max: -1,
			timeouts: int64(s.Timeouts), pending: int64(s.PendingRequests)}
	})
}

// poolStats is one reading of a pool; -1: the pool does not say.
type poolStats struct {
	idle, used, max, timeouts, pending int64
}

// observePool registers read as the pool's metrics. A failure (none happens
// with these names) goes to the global error handler: metrics never stop the
// server.
func (t *telemetry) observePool(name, system string, read func() poolStats) {
	m := t.meter
	count, err1 := m.Int64ObservableUpDownCounter("db.client.connection.count", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections of the pool, by state (idle, used)."))
	maxConns, err2 := m.Int64ObservableUpDownCounter("db.client.connection.max", metric.WithUnit("{connection}"),
		metric.WithDescription("The most connections the pool opens."))
	timeouts, err3 := m.Int64ObservableCounter("db.client.connection.timeouts", metric.WithUnit("{timeout}"),
		metric.WithDescription("Connection requests that timed out or were cancelled before the pool gave a connection."))
	pending, err4 := m.Int64ObservableUpDownCounter("db.client.connection.pending_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests waiting for a connection of the pool."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		otel.Handle(fmt.Errorf("pool metrics: %w", err))
		return
	}
	pool := metric.WithAttributes(attrPoolName.String(name), attrSystem.String(system))
	idle := metric.WithAttributes(attrPoolName.String(name), attrSystem.String(system), attrState.String("idle"))
	used := metric.WithAttributes(attrPoolName.String(name), attrSystem.String(system), attrState.String("used"))
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := read()
		o.ObserveInt64(count, s.idle, idle)
		o.ObserveInt64(count, s.used, used)
		o.ObserveInt64(timeouts, s.timeouts, pool)
		if s.max >= 0 {
			o.ObserveInt64(maxConns, s.max, pool)
		}
		if s.pending >= 0 {
			o.ObserveInt64(pending, s.pending, pool)
		}
		return nil
	}, count, maxConns, timeouts, pending)
	if err != nil {
		otel.Handle(fmt.Errorf("pool metrics: %w", err))
	}
}
