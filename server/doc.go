// Package server is idem's companion server side: an http.Handler middleware
// that makes POST and PATCH requests carrying an Idempotency-Key safe to
// retry, over a pluggable Store (server/memstore, server/pgstore,
// server/redisstore).
//
//	store := memstore.New()
//	mux := http.NewServeMux()
//	mux.Handle("POST /payments", server.Middleware(store,
//		server.WithScope(server.BearerScope),
//		server.WithFingerprint(server.CanonicalJSON),
//	)(http.HandlerFunc(createPayment)))
//
// A new key runs the handler once; its response is captured, recorded, then
// sent. A duplicate that comes while the first request runs waits for it
// (WithInProgressWait, or the client's Prefer: wait=N), then gets the replay or
// a 409 with a short Retry-After; a finished key replays the stored response
// with Idempotent-Replayed: true; a key reused for other content gets 422.
// Refusals, store failures and an unrecordable outcome are RFC 9457 problem
// answers (the Problem* constants).
//
// # Entry points
//
//   - Middleware wraps an http.Handler; NewGuard is the same protocol for a
//     framework whose handlers are not http.Handlers (server/ginidem and
//     server/echoidem are built on it).
//   - The options set the protected methods, the scope (WithScope,
//     BearerScope), the fingerprint (ExactBody, CanonicalJSON), the limits
//     (key length, body and response bytes), TTL and lock TTL, the stored
//     headers, the in-progress wait and an outcome hook (WithOnOutcome).
//   - DeclareEffect, called by a handler once an effect that cannot roll back
//     has happened (a payment provider's charge, an email): from then on its
//     answer, a 5xx included, is recorded, and no retry runs it again.
//   - Store (with Request, RunFunc, Response, Result and Outcome) is the
//     interface a store implements; server/storetest is its contract suite.
//     Pinger is the optional readiness check.
//   - ParseKey and LogKey read and log an Idempotency-Key as the middleware
//     does.
//
// The handler runs with the context the store gives it (pgstore.Tx reads the
// store's transaction from it), reads a fresh reader over the body bytes
// received, and writes to a capture: nothing is sent until the store has
// recorded it, Flush is a no-op, and a hijack is refused. Its Accept-Encoding
// names only the content codings the middleware can decode (gzip, deflate), a
// compressed answer is recorded with its Content-Encoding, and a replay goes
// in that coding only to a retry that accepts it, decoded for any other.
//
// # Where the rules are
//
// docs/CONTRACT.md in the repository (§3) says what every protected request
// gets, case by case; docs/server.md says what the handler sees, how
// duplicates wait and what a 409's Retry-After means; docs/problems.md lists
// the problem types and what a client or an operator does with each;
// docs/stores.md compares the stores.
//
// # Options
//
// One rule holds for every package of idem (the client, server, memstore,
// chaos, idemtest, pgstore, redisstore, ginidem, echoidem): an impossible
// option value is a programming error and panics when the option is created,
// with a message "<package>: <Func>(<value>): want <what is allowed>"
// (server.WithTTL(0) panics "server: WithTTL(0s): want a positive duration"),
// and a constructor panics, in the same form, on a nil option, a nil required
// argument (Middleware(nil)), or a combination only it can judge (pgstore's
// WithReservedConns against the pool's size). Options are checked once, at
// construction, never per request; a value built without panicking is valid,
// and no constructor returns an error for its options. Configuration read at
// run time (flags, files) is validated by the program before it builds options,
// as cmd/idem-server does.
package server
