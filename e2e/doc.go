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
//   - The idem-server binary (built once per run from ../cmd/idem-server) on
//     each store, answering a payment 1.2 s and 4 s after its write, to idem's
//     client with its defaults and a 300 ms attempt time-out: the operation
//     ends in the 201 replay within 1.5 s of the answer, one payment
//     (TestBinaryLateAnswerAfterWrite, issue 8).
//   - A store-kill soak: idem-server on a private redis-server (appendfsync
//     always) and on a private PostgreSQL cluster, a keyed stream of payments
//     while the store is killed (SIGKILL) and restarted twice: no payment made
//     twice, every operation ends within its cap with a 201 or a clear error
//     (TestStoreKillSoak, issue 12). It needs redis-server in PATH and
//     PostgreSQL's server binaries (/usr/lib/postgresql/*/bin or initdb in
//     PATH; run as root, initdb runs as the postgres user), and uses loopback
//     ports 7200-7209 and 5450-5459, moved by IDEM_PRIVATE_PORT_OFFSET.
//
// Run them from this directory:
//
//	go test -race ./...
//
// The PostgreSQL and Redis soaks use IDEM_POSTGRES_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and IDEM_REDIS_ADDR
// (default 127.0.0.1:6379). When a service cannot be reached its soak is
// skipped with a message saying how to start it, unless IDEM_REQUIRE_SERVICES=1,
// which turns the skip into a failure (likewise a missing redis-server or
// initdb for the store-kill soak). Each run uses a table, a schema and keys
// of its own and removes them at the end. -short skips the tests that build
// the binary.
package e2e
