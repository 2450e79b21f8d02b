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
// Options are checked when Server, OnOutcome or Client is called: an
// impossible one panics there, naming the option.
package idemotel
