// Package idemotel instruments idem's client Transport and its server
// middleware with OpenTelemetry: spans and metrics through the TracerProvider
// and MeterProvider you give it (the global ones by default), named after the
// HTTP semantic conventions where they apply (http.request.resend_count,
// http.route, http.request.method, http.response.status_code,
// server.address). It is a module of its own, so that idem's root module
// never downloads OpenTelemetry.
//
// The server side is one option of server.Middleware:
//
//	mw := server.Middleware(store,
//		idemotel.Server(idemotel.WithStoreName("postgres")))
//	http.Handle("POST /payments", otelhttp.NewHandler(mw(create), "payments"))
//
// The client side is a Client, whose two halves go to the idem.Transport: the
// RoundTripper it sends attempts through, and its option:
//
//	c := idemotel.NewClient()
//	client := &http.Client{Transport: idem.NewTransport(c.Transport(nil), c.Option())}
//
// Each attempt is a span under the caller's, and every retry says so
// (http.request.resend_count, idem.retry.reason); see Client for the metrics.
//
// Metric attributes are bounded: route, store, method, status, outcome,
// reason. The Idempotency-Key and the scope never become metric attributes,
// and the key appears on spans only with WithKeyAttribute.
//
// Until an SDK records, the instrumentation allocates nothing of its own:
// instruments that are not Enabled are skipped before their attributes are
// looked up, and attributes are built only for a span that records. With the
// no-op providers (the metric/noop and trace/noop packages) an attempt gets no
// span at all, unless a propagator is set; with the global providers, before
// an SDK is installed, it gets the global tracer's non-recording span, whose
// Start allocates three times: it is not skipped, because that Start is where
// OpenTelemetry Go's eBPF auto-instrumentation (go.opentelemetry.io/auto)
// attaches to record spans with no SDK installed, through a flag this package
// cannot read.
//
// Options are checked when Server, OnOutcome or Client is called: an
// impossible one panics there, naming the option.
package idemotel
