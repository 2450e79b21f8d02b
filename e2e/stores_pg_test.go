package e2e

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
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// skipOrFail skips t with msg, or fails it when IDEM_REQUIRE_SERVICES=1.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	servicetest.Unreachable(t, "%s", msg)
}

// randomSuffix returns 12 random lower-case letters and digits.
func randomSuffix() string { return strings.ToLower(rand.Text()[:12]) }

// openPostgres returns a pgstore.Store on a table of its own, dropped when the
// test ends.
func openPostgres(t *testing.T) server.Store {
	t.Helper()
	pool, table := newPostgresPool(t, "e2e_soak_", 20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := pgstore.New(pool, pgstore.WithTable(table))
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return store
}

// newPostgresPool returns a pool of at most maxConns connections (0: pgxpool's
// default) on the test PostgreSQL, or skips t (fails it in CI) when there is
// none, and a new table name that begins with base. When the test ends, the
// table of that name and those of the name followed by each of also are
// dropped, and the pool is closed.
func newPostgresPool(t *testing.T, base string, maxConns int32, also ...string) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(servicetest.PostgresURL())
	if err != nil {
		t.Fatalf("IDEM_POSTGRES_URL: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
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
		skipOrFail(t, fmt.Sprintf("PostgreSQL not reachable at %s:%d (%v): start PostgreSQL there or set IDEM_POSTGRES_URL",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, err))
	}
	name := base + randomSuffix()
	tables := pgx.Identifier{name}.Sanitize()
	for _, suffix := range also {
		tables += ", " + pgx.Identifier{name + suffix}.Sanitize()
	}
	t.Cleanup(func() {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+tables); err != nil {
			t.Errorf("dropping %s: %v", tables, err)
		}
	})
	return pool, name
}
