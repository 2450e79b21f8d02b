// Package e2e holds idem's end-to-end tests: the idem client and the companion
// server (server/idemtest) talking through real faults.
//
//   - Through toxiproxy, run in-process on 127.0.0.1 in front of the server:
//     latency past the client's attempt timeout, a response that never comes,
//     connections reset on the way in and on the way out, a response cut in
//     its headers or in its body, and a bandwidth limit. Each test checks the
//     number of payments (exactly one) and the attempts the client made.
//   - A soak: 20 concurrent clients × 25 logical payments, with the server
//     failing and dropping 20% of requests at random, on each store: memory,
//     PostgreSQL and Redis. No payment is ever made twice, and every operation
//     ends within its cap with success or a clear error; the test logs a
//     histogram of attempts per operation.
//
// Run them from this directory:
//
//	go test -race ./...
//
// The PostgreSQL and Redis soaks use IDEM_POSTGRES_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and IDEM_REDIS_ADDR
// (default 127.0.0.1:6379). When a service cannot be reached its soak is
// skipped with a message saying how to start it, unless IDEM_REQUIRE_SERVICES=1,
// which turns the skip into a failure. Each run uses a table and a key prefix
// of its own and removes them at the end.
package e2e
