package idemotel

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracers and meters this
// package creates.
const ScopeName = "github.com/idemkit/idem/otel"

// An Option configures the client or the server instrumentation. Options are
// checked when Client, Server or OnOutcome is called: an impossible one (a nil
// provider or function) panics there, naming the option, as the options of
// the idem and server packages do.
type Option func(*config)

type config struct {
	tp    trace.TracerProvider
	mp    metric.MeterProvider
	key   bool
	store string
	route func(*http.Request) string
}

func newConfig(opts []Option) *config {
	c := &config{route: patternRoute}
	for _, o := range opts {
		o(c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c
}

// WithTracerProvider sets the TracerProvider spans are created with (the
// client's attempt spans); the default is the global one, otel.GetTracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	if tp == nil {
		panic("idemotel: WithTracerProvider(nil): want a trace.TracerProvider")
	}
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the MeterProvider the metrics are recorded with; the
// default is the global one, otel.GetMeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	if mp == nil {
		panic("idemotel: WithMeterProvider(nil): want a metric.MeterProvider")
	}
	return func(c *config) { c.mp = mp }
}

// WithKeyAttribute puts the Idempotency-Key on spans, as the idem.key
// attribute. It is off by default: a key can be sensitive (some clients derive
// it from business data), and it identifies one operation, which is what a
// trace is for. Keys never become metric attributes.
func WithKeyAttribute() Option {
	return func(c *config) { c.key = true }
}

// WithStoreName names the server's idempotency store in the idem.store
// attribute of the server's metrics and span events ("postgres", "redis",
// "memory"): an operator running several stores tells them apart. Without it
// the attribute is left out.
func WithStoreName(name string) Option {
	return func(c *config) { c.store = name }
}

// WithRoute sets how the server finds a request's route, the http.route
// attribute: a template such as "/payments/{id}", never the raw path (every
// distinct value is a time series). The default reads http.Request.Pattern,
// which http.ServeMux sets, without its method and host ("POST /payments"
// gives "/payments"); a router that sets no Pattern (gin, echo) needs its own
// function, and a request without a route leaves the attribute out.
func WithRoute(f func(*http.Request) string) Option {
	if f == nil {
		panic("idemotel: WithRoute(nil): want a function")
	}
	return func(c *config) { c.route = f }
}

// patternRoute is the path of the ServeMux pattern that matched r: "POST
// example.com/payments/{id}" gives "/payments/{id}"; a pattern without a path
// gives "".
func patternRoute(r *http.Request) string {
	p := r.Pattern
	if i := strings.IndexAny(p, " \t"); i >= 0 && !strings.Contains(p[:i], "/") {
		p = p[i:] // after the method
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[i:] // after the host, if any
	}
	return ""
}
