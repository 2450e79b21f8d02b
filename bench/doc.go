// Package bench measures idem side by side with its peers (go-retryablehttp,
// failsafe-go's failsafehttp, cenkalti/backoff/v4, go-grpc-middleware's
// retry interceptor) and writes the results as Markdown tables and PNG
// charts.
//
// It is its own module, so the root module never depends on the peers or on
// gonum/plot. One command runs every section and writes results/RESULTS.md:
//
//	cd bench && go run ./cmd/bench          # full run, a few minutes on 2 cores
//	cd bench && go run ./cmd/bench -quick   # CI-sized smoke run, about 90 s
//
// The client overhead measurements are also ordinary benchmarks:
//
//	cd bench && go test -run '^$' -bench Overhead -benchmem
//
// Sections:
//
//  1. Client overhead on the success path (Overhead).
//  2. Correctness under faults: duplicate payments and attempts per operation (Faults).
//  3. The AWS "Exponential Backoff and Jitter" contention simulation, in virtual time (Contention).
//  4. Retry storm against a failing dependency, with and without a retry budget (Storm).
//  5. Server throughput, p50/p99 latency and round trips per store (memory,
//     PostgreSQL, Redis) against the same handler without idem (ServerLoad).
//     PostgreSQL and Redis are found through IDEM_POSTGRES_URL and
//     IDEM_REDIS_ADDR; a store whose server cannot be reached is skipped and
//     RESULTS.md says why.
//  6. A server that does not implement keys: a real 409, bare in-progress
//     409s, a 3 s total outage and a sustained one, with idem,
//     go-retryablehttp and failsafe-go on their defaults (Foreign).
//  7. The cost of OpenTelemetry: the client and the middleware with the
//     idemotel module off, on the no-op providers, on the global ones before
//     an SDK is installed and on the SDK's, as ratios to off in the same run
//     (OTelCost).
//  8. The gateway's cost on the success path: idem-server's gateway
//     (cmd/idem-server/gateway) on the memory and Redis stores against a plain
//     httputil.ReverseProxy, in front of one loopback upstream, as ratios in
//     the same run (GatewayCost).
//  9. A gRPC call's cost on the success path: idem's client interceptor, and
//     its client and server interceptors on the memory store, against a bare
//     call and go-grpc-middleware's retry interceptor, on loopback TCP, as
//     ratios in the same run (GRPCCost).
package bench
