// Package idemtest runs the idem companion server in-process for Go tests, as
// net/http/httptest runs a handler:
//
//	srv := idemtest.NewServer()
//	defer srv.Close()
//	client := &http.Client{Transport: idem.NewTransport(srv.Client().Transport)}
//	// POST srv.URL+"/payments" ... then:
//	if n := srv.Payments("cus_1"); n != 1 { t.Fatalf("charged %d times", n) }
//
// It serves exactly the routes of cmd/idem-server (the demo of internal/demo):
// POST /payments behind server.Middleware with the scope of the bearer token,
// GET /payments?customer=C, POST /payments/unprotected (no idempotency: retries
// double-charge), GET /livez and /healthz (liveness) and GET /readyz
// (readiness), over a memstore.Store by default.
//
// The Chaos-* request headers are always honoured (see package chaos), so a
// test asks for the fault it wants on the request it wants. Chaos-Crash cannot
// end the test process: here it panics with http.ErrAbortHandler after the
// business write, which aborts the connection; the middleware releases the key
// and, the memory ledger sharing no transaction with the store, the payment
// stays (the documented crash window of CONTRACT §4.1).
//
// Note that net/http's Transport itself resends a request that carries an
// Idempotency-Key when a reused keep-alive connection closes before any
// response byte: a test that wants to see a Chaos-Drop as an error uses a
// client with keep-alives off.
//
// # Options
//
// An impossible option value panics when the option is created, and
// NewServer on a nil Option, with a message "idemtest: <Func>(<value>): want
// <what is allowed>" (WithStore(nil) panics "idemtest: WithStore(nil): want a
// server.Store"). It is the rule of every idem package (see package server).
package idemtest
