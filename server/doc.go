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
// # What a protected request gets
//
// Requests whose method is not protected (WithMethods; POST and PATCH by
// default) pass straight through, even if they carry a key. For the others:
//
//   - no Idempotency-Key, or a blank one: 400, ProblemMissingKey;
//   - a key longer than 255 characters, not visible ASCII, a malformed
//     Structured Field string, or several Idempotency-Key lines: 400,
//     ProblemInvalidKey (see ParseKey: "abc" and abc are one key);
//   - a scope function (WithScope) that fails: 401, ProblemUnauthenticated
//     (BearerScope fails for a request without credentials: anonymous
//     callers never share a scope);
//   - a body over the limit (WithMaxBodyBytes, 1 MiB): 413,
//     ProblemBodyTooLarge; nothing is claimed or stored;
//   - a new key: the handler runs once; its response is recorded, then sent;
//   - a finished key with another fingerprint: 422, ProblemMismatch;
//   - a key whose first request still runs: the duplicate waits for it, up to
//     5 s (WithInProgressWait) or the client's Prefer: wait=N when shorter,
//     and gets its replay (or, if the first failed and released the key, runs
//     the handler itself); past the wait, or when the client leaves: 409,
//     ProblemInProgress, with a short Retry-After (see below);
//   - a finished key with the same fingerprint: the stored status, allow-listed
//     headers and body, byte for byte, plus Idempotent-Replayed: true (2xx and
//     4xx are recorded, except the refusals listed below);
//   - the store unreachable before the handler ran: 503,
//     ProblemStoreUnavailable, Retry-After; the handler never runs unprotected;
//   - the handler ran but its response could not be recorded (the store
//     returned an error wrapping ErrNotRecorded), or the store reports the key
//     OutcomeUnknown from such an earlier run: 500, ProblemOutcomeUnknown, no
//     Retry-After; the unrecorded response is not sent, the store keeps the
//     key blocked, and every retry gets this same answer rather than a second
//     effect (docs/problems.md says how an operator resolves it).
//
// Every problem answer is RFC 9457 application/problem+json with
// Cache-Control: no-store; the type URIs are documented in docs/problems.md.
//
// # What the handler sees
//
// The fingerprint (ExactBody by default, or CanonicalJSON) is computed once,
// before the handler runs, from the body bytes received; the handler reads a
// fresh reader over the same bytes, so nothing it does to the request changes
// what is recorded. It runs with the context the store gives it (which may
// carry the store's transaction).
//
// Its response is captured: nothing is sent until the store has recorded it.
// All headers the handler sets are sent on the first execution; only the
// allow-listed ones (Content-Type, Location, ETag, plus WithStoredHeaders) are
// recorded and replayed; Set-Cookie, Date and hop-by-hop headers never are.
// Flush is a no-op: the response goes out whole. Hijack, directly or through
// http.ResponseController, is refused with ErrUnprotectable and the request
// is answered 500, ProblemUnprotectable. A response larger than
// WithMaxResponseBytes is refused the same way (Write returns
// ErrResponseTooLarge): what cannot be recorded is not sent.
//
// The response is not recorded, and the key is released so that a retry runs
// the handler again (a transactional store rolls the handler's writes back),
// when the handler answers 5xx, panics, is refused a hijack or writes more than
// the response limit. A refusal is not recorded either (400, 401, 403, 405,
// 406, 408, 411, 413, 414, 415, 422, 429, 431: the request was refused before
// anything was done), so invalid requests take no room in the store and a
// corrected one runs; answer these only when the handler did nothing. Nor is
// a 3xx: a 307 or 308 says the
// operation is done elsewhere, and the client's next hop, with the same key
// and another path (so another fingerprint), must run there instead of getting
// 422. Serve redirects in front of the middleware where you can, so they never
// touch the key. A panic is recovered inside the
// store's run (so the store releases its claim) and then raised again, with
// the original value, once the store has returned: net/http (or an outer
// recovery middleware) handles it as it would without idem, and the client
// sees the connection aborted.
//
// A response the handler completed is recorded even if the client went away
// meanwhile: the retry gets the replay. A handler that writes nothing has
// answered 200 with an empty body (net/http sends that), which is recorded
// and replayed like any 200; a framework adapter that can tell "an outer
// layer will answer" from "answered" says so to its Guard.
//
// # The handler's own 5xx after an effect
//
// By default a 5xx means "nothing was done", and the key is released. That
// holds when the handler's writes roll back with it (pgstore.Tx); it does not
// for an effect outside the store's transaction (a payment provider's charge,
// an email, a write to memory or Redis alongside memstore or redisstore). Such
// a handler calls DeclareEffect(r.Context()) as soon as the effect has
// happened: from then on its answer is recorded whatever its status, a 5xx
// included, and a panic (or a response that cannot be recorded) records
// ProblemOutcomeUnknown; a retry never runs the effect again.
//
// # Duplicates: the wait and the 409
//
// A duplicate never polls: the store waits (Request.Wait) and is notified
// when the first request records or releases its key (memstore: a channel
// per claim). The wait is the smaller of WithInProgressWait (default 5 s; 0
// answers 409 at once) and the client's Prefer: wait=N (RFC 7240, whole
// seconds; the first wait preference counts, a malformed one is ignored),
// which Preference-Applied: wait=N confirms. A client sets it a little under
// its attempt time-out, so that it gets the 409 before it gives up.
//
// The 409's Retry-After says when the answer will likely exist, not how long
// the claim may last: the 90th percentile of the last 64 handler run times of
// this middleware, less the time the duplicate already waited, never more
// than the owner's remaining lease (Result.RetryAfter), and at least one
// second (one second as well before any run), rounded to the nearest whole
// second rather than up.
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
