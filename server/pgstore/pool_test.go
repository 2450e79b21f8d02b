package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// urlOf returns tp's URL, after making sure tp is reachable (or skipping).
func urlOf(t *testing.T, tp pgtest.Topology) string {
	t.Helper()
	tp.Pool(t, 1)
	return tp.URL()
}

// TestConfigurePoolChoosesTheQueryMode: pgx's statement cache directly,
// unnamed statements through PgBouncer, and a mode the URL names is kept.
func TestConfigurePoolChoosesTheQueryMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		tp     pgtest.Topology
		suffix string
		want   pgx.QueryExecMode
	}{
		{pgtest.Direct, "", pgx.QueryExecModeCacheStatement},
		{pgtest.PgBouncer, "", pgx.QueryExecModeCacheDescribe},
		{pgtest.PgBouncer, "&default_query_exec_mode=exec", pgx.QueryExecModeExec},
		{pgtest.Direct, "&default_query_exec_mode=describe_exec", pgx.QueryExecModeDescribeExec},
	} {
		t.Run(tt.tp.Name+tt.suffix, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(urlOf(t, tt.tp) + tt.suffix)
			if err != nil {
				t.Fatal(err)
			}
			if err := pgstore.ConfigurePool(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			if got := cfg.ConnConfig.DefaultQueryExecMode; got != tt.want {
				t.Fatalf("mode %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPgBouncerWithTheURLAUserWrites: NewPool on the plain PgBouncer URL gives
// a store that migrates (twice: a restart), executes and replays.
func TestPgBouncerWithTheURLAUserWrites(t *testing.T) {
	t.Parallel()
	url := urlOf(t, pgtest.PgBouncer)
	for range 2 { // the second start finds the table
		pool, err := pgstore.NewPool(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close) // after the tables are dropped
		table := pgtest.Table(t, pool, "idem_test")
		e := newEnvOn(t, pool, table, pgtest.Table(t, pool, "pay_test"))
		for i := range 20 { // enough statements to meet other server connections
			calls := 0
			key := "k" + string(rune('a'+i))
			for _, want := range []server.Outcome{server.OutcomeExecuted, server.OutcomeReplayed} {
				res, err := e.store.Do(context.Background(), req(key, "fp"), payRun(t, e, &calls, true))
				if err != nil || res.Outcome != want {
					t.Fatalf("Do %s = %v, %v; want %v", key, res.Outcome, err, want)
				}
			}
		}
		if n := e.count(t); n != 20 {
			t.Fatalf("%d payments, want 20", n)
		}
	}
}

// TestMigrateRefusesTheStatementCacheBehindPgBouncer: a pool built with pgx's
// defaults on a PgBouncer URL fails on the first requests (42P05, 26000);
// Migrate says so at start-up, with the fix, after creating the table.
func TestMigrateRefusesTheStatementCacheBehindPgBouncer(t *testing.T) {
	t.Parallel()
	url := urlOf(t, pgtest.PgBouncer)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool, pgstore.WithTable(pgtest.Table(t, pool, "idem_test")))
	err = store.Migrate(context.Background())
	if !errors.Is(err, pgstore.ErrStatementCacheBehindProxy) {
		t.Fatalf("Migrate = %v, want ErrStatementCacheBehindProxy", err)
	}
	var exists bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", pgx.QueryExecModeSimpleProtocol, store.Table()).Scan(&exists); err != nil || !exists {
		t.Fatalf("table created: %v, %v", exists, err)
	}
	// Named in the URL, the mode is the user's choice: no error.
	pool2, err := pgxpool.New(context.Background(), url+"&default_query_exec_mode=cache_statement")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	store2 := pgstore.New(pool2, pgstore.WithTable(store.Table()))
	if err := store2.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate with the mode named in the URL = %v", err)
	}
}
