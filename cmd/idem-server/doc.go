// Command idem-server is idem's companion server: the demo payments API behind
// the idempotency middleware, with fault injection for trying clients against
// lost responses, crashes, slow handlers and failures.
//
// It is its own module; run it from its directory:
//
//	cd cmd/idem-server && go run . -addr 127.0.0.1:8080 -chaos
//	go run -C cmd/idem-server . -addr 127.0.0.1:8080   # from the repository root
//
// Routes (the same as server/idemtest):
//
//	POST /payments              {"customer","amount","currency"}, needs an Idempotency-Key;
//	                            records are scoped by the bearer token
//	GET  /payments?customer=C   {"count":N,"payments":[...]}
//	POST /payments/unprotected  the same handler with no idempotency
//	GET  /healthz               200 ok
//
// With -chaos, requests may carry Chaos-Delay, Chaos-Delay-After-Write (the
// payment is made, then the answer is late, whether or not the client waits),
// Chaos-Fail (+ Chaos-Retry-After),
// Chaos-Crash: after-write (the process exits with status 3 after the business
// write, before the response is recorded) and Chaos-Drop: after-record (see
// package server/chaos). The -chaos-*-rate and -chaos-delay-max flags inject
// faults at random, with or without -chaos.
//
// It prints "idem-server listening on http://ADDR" on standard output once it
// accepts connections, logs one JSON line per request on standard error
// (method, path, status, key, replayed, duration_ms), and shuts down gracefully
// on SIGINT or SIGTERM: it stops accepting, lets requests finish for
// -shutdown-timeout (at most -lock-ttl), then cancels those still running so
// their stores roll back or release their claims (a retry after a restart runs
// once, no 409), and closes the stores within 5s; a second signal exits at once.
// -postgres-url may point at PgBouncer in transaction pooling mode. Exit status: 0 after a clean shutdown, 2 for bad flags,
// 1 for any other error, 3 for a chaos crash.
package main
