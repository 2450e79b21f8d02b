// Package pgtest connects the pgstore tests to a real PostgreSQL server and gives
// each test a table of its own.
//
// The server is IDEM_POSTGRES_URL (default DefaultURL). When it cannot be
// reached the tests are skipped with a message saying how to run them, unless
// IDEM_REQUIRE_SERVICES=1, in which case they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/servicetest"
)

// DefaultURL is the server the tests use when IDEM_POSTGRES_URL is not set.
const DefaultURL = servicetest.DefaultPostgresURL

// URL returns the connection string the tests use.
func URL() string { return servicetest.PostgresURL() }

// Pool returns a pool on the test server with at most maxConns connections,
// closed when the test ends, or skips (fails, with IDEM_REQUIRE_SERVICES=1) the
// test when the server cannot be reached.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		tb.Fatalf("pgtest: IDEM_POSTGRES_URL: %v", err)
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
		servicetest.Unreachable(tb, "pgtest: PostgreSQL not reachable at %s (%v): start PostgreSQL there or set IDEM_POSTGRES_URL", redact(URL()), err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Table returns a fresh table name starting with prefix and drops the table,
// if the test created it, when the test ends.
func Table(tb testing.TB, pool *pgxpool.Pool, prefix string) string {
	tb.Helper()
	name := prefix + "_" + strings.ToLower(rand.Text()[:12])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	return name
}

// Advance moves the records of table back in time by d: every created_at and
// expires_at is shifted back, as if d had passed. It is how the tests advance a
// PostgreSQL store's clock, which is the server's clock_timestamp().
func Advance(tb testing.TB, pool *pgxpool.Pool, table string, d time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{table}.Sanitize()+
		" SET created_at = created_at - $1::bigint * interval '1 microsecond', expires_at = expires_at - $1::bigint * interval '1 microsecond'",
		d.Microseconds())
	if err != nil {
		tb.Fatalf("pgtest: advance %s by %v: %v", table, d, err)
	}
}

func redact(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}
