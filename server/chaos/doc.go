// Package chaos injects faults into an HTTP server protected by idem's
// middleware, so that a plain HTTP client can watch idem's guarantees hold (or,
// on an unprotected route, fail). The demo payments server of cmd/idem-server
// and server/idemtest is built with it.
//
// Faults are asked for per request with headers, when enabled:
//
//	Chaos-Delay: 800ms              sleep before the business write (the request's context ends the sleep)
//	Chaos-Delay-After-Write: 800ms  sleep after the business write, whatever the request's context, then answer
//	Chaos-Fail: 503                 answer that status (400-599) as problem+json, doing no work
//	Chaos-Retry-After: 1            with Chaos-Fail: the Retry-After header to send, in seconds
//	Chaos-Crash: after-write        die after the business write, before the response is recorded
//	Chaos-Drop: after-record        do everything, then cut the connection instead of answering
//
// or at random, with WithFailRate (503, Retry-After: 1), WithDropRate and
// WithDelayMax, for soak tests. A malformed header is answered 400 with a
// problem detail naming it.
//
// Where each fault sits relative to the idempotency middleware matters:
// Chaos-Fail and Chaos-Drop act outside it (a failing gateway; a response lost
// on the way back after the record was written), Chaos-Delay,
// Chaos-Delay-After-Write and Chaos-Crash act inside the handler it protects,
// through the hooks BeforeWrite and AfterWrite, which the protected handler
// calls around its business write (a request that
// asks for both Chaos-Delay-After-Write and Chaos-Crash sleeps, then crashes). What "crash" means is the
// caller's choice (WithCrash): the runnable server exits the process; the
// in-process test server aborts the handler with http.ErrAbortHandler. On the
// memory store either way is the documented crash window: the payment stays
// and the key is released.
//
// The two delays differ in what a client time-out does. A client that gives up
// during Chaos-Delay cancels the work: nothing is written, so a time-out alone
// never double-charges. Chaos-Delay-After-Write is a server that finished the
// write but is slow to answer, as real ones often are: the payment stands
// whether or not the client waits, so a client that times out and retries
// without a key pays twice on an unprotected route. On a protected route the
// response is recorded when the delay ends, and a retry with the same key
// during the delay waits for it (or, past the middleware's wait, is answered
// 409, request in progress).
//
// # Options
//
// Options follow the rule of every idem package (see package server):
// an impossible setting panics when the option is created, and New on a nil
// Option, with a message "chaos: <Func>(<value>): want <what is allowed>"
// (WithFailRate(1.5) panics "chaos: WithFailRate(1.5): want 0 <= p <= 1").
package chaos
