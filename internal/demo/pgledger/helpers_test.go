package pgledger_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testkit/servicetest"
)

// testPool returns a pool on the test server (servicetest.PostgresURL), closed
// when the test ends, or skips (fails, with IDEM_REQUIRE_SERVICES=1) the test
// when the server cannot be reached.
func testPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(servicetest.PostgresURL())
	if err != nil {
		tb.Fatalf("%s: %v", servicetest.EnvPostgresURL, err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		servicetest.Unreachable(tb, "PostgreSQL not reachable (%v): start it or set %s", err, servicetest.EnvPostgresURL)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// testTable returns a fresh table name starting with prefix and drops the
// table, if the test created it, when the test ends.
func testTable(tb testing.TB, pool *pgxpool.Pool, prefix string) string {
	tb.Helper()
	name := prefix + "_" + strings.ToLower(rand.Text()[:12])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			tb.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}
