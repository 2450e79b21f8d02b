// Package servicetest holds the one rule every idem test that needs a real
// PostgreSQL or Redis follows: where the server is (IDEM_POSTGRES_URL,
// IDEM_REDIS_ADDR, with local defaults), and what happens when it cannot be
// reached: the test is skipped with a message saying how to run it, unless
// IDEM_REQUIRE_SERVICES=1 (set by .ci/run), in which case it fails.
package servicetest

import (
	"fmt"
	"os"
	"testing"
)

// Environment variables and the defaults behind them.
const (
	EnvRequire         = "IDEM_REQUIRE_SERVICES"
	EnvPostgresURL     = "IDEM_POSTGRES_URL"
	EnvRedisAddr       = "IDEM_REDIS_ADDR"
	EnvPgBouncerURL    = "IDEM_PGBOUNCER_URL"
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedisAddr   = "127.0.0.1:6379"
)

// Required reports whether an unreachable server must fail the test.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// PostgresURL is the PostgreSQL server the tests use.
func PostgresURL() string { return getenv(EnvPostgresURL, DefaultPostgresURL) }

// PgBouncerURL is a PgBouncer in transaction pooling mode in front of the
// PostgreSQL server (.ci/pgbouncer.sh starts one), or "" when not set: the tests
// through it are then skipped, whatever EnvRequire says.
func PgBouncerURL() string { return os.Getenv(EnvPgBouncerURL) }

// RedisAddr is the Redis server the tests use.
func RedisAddr() string { return getenv(EnvRedisAddr, DefaultRedisAddr) }

// Unreachable ends tb because a server it needs cannot be reached: a failure
// when Required, a skip otherwise. The message (format and args) should say
// which server, where, and how to make it reachable; Unreachable adds the
// IDEM_REQUIRE_SERVICES part.
func Unreachable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		tb.Fatal(msg + " (" + EnvRequire + "=1 makes this a failure)")
		return
	}
	tb.Skip(msg + "; set " + EnvRequire + "=1 to fail instead of skipping")
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
