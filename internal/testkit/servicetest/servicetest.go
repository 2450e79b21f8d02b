// Package servicetest holds the one rule every idem test that needs a real
// PostgreSQL or Redis follows: where the server is (IDEM_POSTGRES_URL,
// IDEM_REDIS_ADDR, with local defaults), and what happens when it cannot be
// reached: the test is skipped with a message saying how to run it, unless
// IDEM_REQUIRE_SERVICES=1 (set by .ci/run), in which case it fails. On Unix
// it also makes a PostgreSQL cluster of a test's own (InitPostgres), for the
// tests that kill or freeze a server the shared one must never be.
package servicetest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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

	// The optional Redis topologies (.ci/redis-topologies.sh starts them): the
	// tests that need one skip while its variable is unset, whatever
	// IDEM_REQUIRE_SERVICES says, and follow the rule above once it is set.
	EnvRedisClusterAddrs  = "IDEM_REDIS_CLUSTER_ADDRS"  // comma list of Cluster seeds
	EnvRedisSentinelAddrs = "IDEM_REDIS_SENTINEL_ADDRS" // comma list of sentinels
	EnvRedisMasterName    = "IDEM_REDIS_MASTER_NAME"    // the Sentinel master's name

	// EnvPortOffset moves the loopback port ranges of the private servers the
	// tests start (redis-server, PostgreSQL, proxies) by this many ports, so
	// that two runs on one machine use disjoint ranges. Default 0.
	EnvPortOffset = "IDEM_PRIVATE_PORT_OFFSET"
)

// Port returns port moved by EnvPortOffset: the port a private server whose
// range starts at or covers port uses. An offset that is not a number, or
// that moves the port out of 1-65535, is ignored.
func Port(port int) int {
	off, err := strconv.Atoi(os.Getenv(EnvPortOffset))
	if err != nil || port+off < 1 || port+off > 65535 {
		return port
	}
	return port + off
}

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

// Optional returns the comma-separated list in the environment variable env,
// or skips tb, saying how to set it, when env is unset: an optional topology
// is tested only where it has been set up. howto says how to get one.
func Optional(tb testing.TB, env, howto string) []string {
	tb.Helper()
	v := os.Getenv(env)
	if v == "" {
		tb.Skip(env + " is not set: " + howto)
		return nil
	}
	return strings.Split(v, ",")
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
