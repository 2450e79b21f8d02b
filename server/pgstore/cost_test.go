package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// envCostURL names the server TestCostPerRequest measures; unset, the test is
// skipped. bench/pgcost.sh sets it to a private PostgreSQL it runs under
// valgrind's callgrind, which counts the instructions of each backend.
const envCostURL = "IDEM_PGCOST_URL"

// TestCostPerRequest is a measurement, not a check: it serves the cases of
// bench §5 (the own-transaction baseline, a new key, a replay) with the real
// Store.Do, each case twice (costRuns requests, then three times as many),
// each run on a connection of its own, and prints one line per run: "COST
// <case> <requests> <backend pid>". The difference between a case's two
// backends, divided by the difference in requests, is what one request costs
// PostgreSQL, the connection's start and the first executions (planning, the
// catalog caches) cancelled out. bench/pgcost.sh reads the lines.
func TestCostPerRequest(t *testing.T) {
	url := os.Getenv(envCostURL)
	if url == "" {
		t.Skipf("%s not set: a measurement, run by bench/pgcost.sh", envCostURL)
	}
	ctx := context.Background()
	setup := costPool(t, url)
	keys, pays := "idem_cost_keys", "idem_cost_pay"
	if _, err := setup.Exec(ctx, "DROP TABLE IF EXISTS "+keys+", "+pays); err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, setup, keys, pays)
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP TABLE IF EXISTS "+keys+", "+pays) })
	e.execute(t, "replayed", "fp", new(int))

	seq := 0
	newKey := func(t *testing.T, _ *pgxpool.Pool, e env) {
		seq++
		e.execute(t, "cost-"+strconv.Itoa(seq)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), "fp", new(int))
	}
	cases := []struct {
		name string
		opts []pgstore.Option
		run  func(t *testing.T, pool *pgxpool.Pool, e env)
	}{
		{"baseline", nil, func(t *testing.T, pool *pgxpool.Pool, e env) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := paymentFor(ctx)
			if err := e.ledger.insert(pgstore.ContextWithTx(ctx, tx), p); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"newkey", nil, newKey},
		// The idle-in-transaction timeout left to the session (set on the
		// role, the database or the connection string instead).
		{"newkey_session_timeout", []pgstore.Option{pgstore.WithIdleInTxTimeout(0)}, newKey},
		{"replay", nil, func(t *testing.T, _ *pgxpool.Pool, e env) {
			res, err := e.store.Do(ctx, req("replayed", "fp"), func(context.Context) (*server.Response, bool) {
				t.Fatal("replay ran the handler")
				return &server.Response{Status: http.StatusInternalServerError}, false
			})
			if err != nil || res.Outcome != server.OutcomeReplayed {
				t.Fatalf("replay: %v, %v", res.Outcome, err)
			}
		}},
	}
	for _, c := range cases {
		for _, n := range []int{costRuns, 3 * costRuns} {
			pool := costPool(t, url)
			ce := newEnvOn(t, pool, keys, pays, c.opts...)
			var pid uint32
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pid = conn.Conn().PgConn().PID()
			conn.Release()
			for range n {
				c.run(t, pool, ce)
			}
			pool.Close()
			fmt.Printf("COST %s %d %d\n", c.name, n, pid)
		}
	}
}

// costRuns is the number of requests of a case's first run.
const costRuns = 200

// costPool is a pool of one connection on url, configured as pgstore.NewPool
// configures one, with the store's reserve switched off by its size.
func costPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgstore.ConfigurePool(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var one int
	if err := pool.QueryRow(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&one); err != nil {
		t.Fatal(err)
	}
	return pool
}
