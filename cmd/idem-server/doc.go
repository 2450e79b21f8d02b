// Command idem-server is idem's companion server: the demo payments API behind
// the idempotency middleware, with fault injection for trying clients against
// lost responses, crashes, slow handlers and failures.
//
// It is its own module; run it from its directory:
//
//	cd cmd/idem-server && go run . -addr 127.0.0.1:8080 -chaos
//	go run -C cmd/idem-server . -addr 127.0.0.1:8080   # from the repository root
//
// With -upstream URL it serves no demo: it is an idempotency gateway in front
// of that API, whatever its language. Requests that match -protect (every
// POST and PATCH by default) go through the middleware and its store to the
// upstream, which is asked at most once per key; the rest pass through
// untouched; its own endpoints are /_idem/livez, /_idem/readyz and
// /_idem/metrics. docs/gateway.md in the repository says how to run it, and
// docs/CONTRACT.md what each upstream answer means for the key.
//
// Routes of the demo (the same as server/idemtest):
//
//	POST /payments              {"customer","amount","currency"}, needs an Idempotency-Key;
//	                            records are scoped by the caller (see Callers below)
//	GET  /payments?customer=C   {"count":N,"payments":[...],"next":CURSOR}, the caller's
//	                            payments only, a page at a time (&limit=N, 1 to 1000,
//	                            default 100; &after=CURSOR for the next page)
//	POST /payments/unprotected  the same handler with no idempotency
//	GET  /livez, /healthz       200 while the process serves (liveness)
//	GET  /readyz                200 when the store answers, 503 otherwise (readiness)
//	GET  /metrics               Prometheus text format (see docs/operating.md)
//
// With -chaos, requests may carry Chaos-Delay, Chaos-Delay-After-Write (the
// payment is made, then the answer is late, whether or not the client waits),
// Chaos-Fail (+ Chaos-Retry-After),
// Chaos-Crash: after-write (the process exits with status 3 after the business
// write, before the response is recorded) and Chaos-Drop: after-record (see
// package server/chaos). The -chaos-*-rate and -chaos-delay-max flags inject
// faults at random, with or without -chaos.
//
// Callers: with -tokens FILE (one "TENANT TOKEN" a line; see docs/server.md)
// a request whose bearer token the file lists is its tenant's, and any other
// credentials, or none, get 401 (-anonymous serves callers without an
// Authorization header in one public scope instead). Without -tokens nothing is
// authenticated: every bearer token is a scope of its own, and a request
// without one is in the public scope (-anonymous=false: 401). Such a deployment
// lets any caller send a new token with every request, so that each is a new
// scope within its share of the store: one caller can fill the store, and then
// every caller's new keys get 503 until records expire. Fairness between
// callers needs -tokens.
//
// Bounds: -max-buffered-bytes (64 MiB) for the keyed request bodies held at
// once by the whole process (past it, 503), -max-waiting (256) for the
// duplicates waiting at once (past it, 409 at once), -request-timeout (25s, inside the idem client's 30s cap)
// for each keyed request (its body, the store before the handler, the
// handler's context); -max-entries and -max-bytes for the memory store,
// -redis-scope-max-entries and -redis-scope-max-bytes for each scope's share of
// Redis, -postgres-scope-max-entries and -postgres-scope-max-bytes (100,000 and
// 64 MiB) for each scope's share of PostgreSQL, and -max-payments (100,000) for the demo's in-memory ledger (past it,
// 507). Metric attributes never come from what a caller sends (the HTTP
// server's metrics keep no Host).
//
// It prints "idem-server listening on http://ADDR" on standard output once it
// accepts connections, logs one JSON line per request on standard error
// (method, path, status, key cut to 64 bytes, replayed, duration_ms, and at
// level WARN store_error whenever the store failed, or the cause of any other
// 5xx: every 503 names its cause), and shuts down gracefully
// on SIGINT or SIGTERM: it stops accepting, lets requests finish for
// -shutdown-timeout (at most -lock-ttl), then cancels those still running so
// their stores roll back or release their claims (a retry after a restart runs
// once, no 409), and closes the stores within 5s; a second signal exits at once.
// -postgres-url may point at PgBouncer in transaction pooling mode.
//
// In PostgreSQL the demo owns two tables under names of its own,
// idem_demo_keys and idem_demo_payments (in the connection's search_path), and
// never changes a table it did not create: when a table of one of those names
// exists with another shape, it refuses to start (status 1) with a message
// that names the table and the fix. -store postgres keeps keys and payments in
// -postgres-url's database; -store memory or redis keeps the payments in
// memory, or in PostgreSQL with -ledger-postgres-url. A flag of another store
// than -store's (-postgres-url with -store redis, -redis-addr with -store
// postgres, -max-entries with either) is a usage error. -version prints the
// version make dist stamped into the binary, or else the module version it was
// built from.
//
// Redis topologies: -redis-addr takes a comma list (more than one address is a
// Redis Cluster; -redis-cluster forces Cluster with a single seed);
// -redis-master-name NAME selects Sentinel, -redis-addr then listing the
// sentinels; -redis-min-replicas N (with -redis-replica-timeout) makes every
// claim and record wait for N replicas (WAIT), which a Sentinel failover needs
// to lose nothing. The server refuses to start on a Redis whose
// maxmemory-policy can evict records, unless -redis-allow-eviction.
//
// Telemetry: /metrics holds the idempotency middleware's metrics (package
// github.com/idemkit/idem/otel), the HTTP server's (http.server.*), the
// PostgreSQL and Redis pools' (db.client.connection.*), and the Go runtime's
// and the process's. Traces of every request go over OTLP/HTTP when
// OTEL_TRACES_EXPORTER=otlp, or when it is unset and
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; the
// other OTEL_* variables (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_HEADERS, ...) work as the
// OpenTelemetry SDK documents them.
//
// Exit status: 0 after a clean shutdown, 2 for bad flags,
// 1 for any other error, 3 for a chaos crash.
package main
