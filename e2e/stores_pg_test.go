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
	dsn := servicetest.PostgresURL()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("IDEM_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 20
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
	table := "e2e_soak_" + randomSuffix()
	t.Cleanup(func() {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
	})
	store := pgstore.New(pool, pgstore.WithTable(table))
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return store
}
