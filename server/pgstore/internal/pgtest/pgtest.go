// Package pgtest connects the pgstore tests to a real PostgreSQL server and gives
// each test a table of its own.
//
// The server is IDEM_POSTGRES_URL (default DefaultURL). When it cannot be
// reached the tests are skipped with a message saying how to run them, unless
// IDEM_REQUIRE_SERVICES=1, in which case they fail. Tests that run on every
// Topology also run through PgBouncer in transaction mode when
// IDEM_PGBOUNCER_URL is set (.ci/pgbouncer.sh start).
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

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server/pgstore"
)

// DefaultURL is the server the tests use when IDEM_POSTGRES_URL is not set.
const DefaultURL = servicetest.DefaultPostgresURL

// URL returns the connection string the tests use.
func URL() string { return servicetest.PostgresURL() }

// Pool returns a pool on the test server with at most maxConns connections,
// closed when the test ends, or skips (fails, with IDEM_REQUIRE_SERVICES=1) the
// test when the server cannot be reached. Like every pool here it is built as
// pgstore.NewPool builds one.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return Direct.Pool(tb, maxConns)
}

// A Topology is one way of reaching the test server.
type Topology struct {
	Name string // subtest name
	env  string // the variable that holds its URL
	url  func() string
}

// The topologies the store is tested on.
var (
	// Direct is PostgreSQL itself, at IDEM_POSTGRES_URL.
	Direct = Topology{Name: "direct", env: servicetest.EnvPostgresURL, url: servicetest.PostgresURL}
	// PgBouncer is PgBouncer in transaction pooling mode in front of it, at
	// IDEM_PGBOUNCER_URL; tests through it are skipped when that is not set.
	PgBouncer = Topology{Name: "pgbouncer", env: servicetest.EnvPgBouncerURL, url: servicetest.PgBouncerURL}
)

// URL is tp's connection string; "" if its variable is not set.
func (tp Topology) URL() string { return tp.url() }

// Topologies lists every topology, for tests that run on each (t.Run(tp.Name, ...)).
func Topologies() []Topology { return []Topology{Direct, PgBouncer} }

// Pool returns a pool through tp with at most maxConns connections, closed when
// the test ends. An unset URL skips the test with a message saying how to set it;
// an unreachable server skips it too, or fails it with IDEM_REQUIRE_SERVICES=1.
func (tp Topology) Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	url := tp.url()
	if url == "" {
		tb.Skipf("pgtest: %s not set: start PgBouncer in transaction mode (.ci/pgbouncer.sh start prints its URL) and set %s to run the tests through it", tp.env, tp.env)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", tp.env, err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = pgstore.ConfigurePool(ctx, cfg)
	var pool *pgxpool.Pool
	if err == nil {
		pool, err = pgxpool.NewWithConfig(ctx, cfg)
	}
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		servicetest.Unreachable(tb, "pgtest: %s not reachable at %s (%v): start it there or set %s", tp.Name, redact(url), err, tp.env)
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

// EndSession ends the PostgreSQL session that runs tx, as a crash of the
// process holding it would: pg_terminate_backend from a connection of its own
// to the test server directly (through PgBouncer too, tx's server session is
// the one ended), waiting until the server has ended it, so that its
// transaction is rolled back and its locks released when EndSession returns.
// Only ever a session of the test's own.
func EndSession(tb testing.TB, tx pgx.Tx) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		tb.Fatalf("pgtest: the session's pid: %v", err)
	}
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.Background())
	var ended bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1, 20000)", pid).Scan(&ended); err != nil || !ended {
		tb.Fatalf("pgtest: ending session %d: %v, %v", pid, ended, err)
	}
}

func redact(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}
