package pgstore_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// env is one test's store, ledger and pool, on tables of its own.
type env struct {
	pool   *pgxpool.Pool
	store  *pgstore.Store
	ledger *ledger
	table  string
}

func newEnv(t testing.TB, opts ...pgstore.Option) env {
	t.Helper()
	return newEnvVia(t, pgtest.Direct, opts...)
}

// newEnvVia is newEnv with PostgreSQL reached through tp.
func newEnvVia(t testing.TB, tp pgtest.Topology, opts ...pgstore.Option) env {
	t.Helper()
	pool := tp.Pool(t, 32)
	return newEnvOn(t, pool, pgtest.Table(t, pool, "idem_test"), pgtest.Table(t, pool, "pay_test"), opts...)
}

// eachTopology runs f as a parallel subtest per topology: PostgreSQL directly
// and through PgBouncer in transaction mode (skipped unless IDEM_PGBOUNCER_URL).
func eachTopology(t *testing.T, f func(t *testing.T, tp pgtest.Topology)) {
	t.Helper()
	for _, tp := range pgtest.Topologies() {
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel()
			f(t, tp)
		})
	}
}

func newEnvOn(t testing.TB, pool *pgxpool.Pool, table, ledgerTable string, opts ...pgstore.Option) env {
	t.Helper()
	store := pgstore.New(pool, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
	ledger := newLedger(pool, ledgerTable)
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ledger.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return env{pool: pool, store: store, ledger: ledger, table: table}
}

func (e env) count(t testing.TB) int {
	t.Helper()
	n, err := e.ledger.count(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func req(key, fingerprint string) server.Request {
	return server.Request{Scope: "tenant-a", Key: key, Fingerprint: fingerprint, TTL: time.Hour, LockTTL: 30 * time.Second}
}

// execute runs a request of key with fingerprint fp through payRun, and
// fails the test unless it executes (the first request of a key).
func (e env) execute(t testing.TB, key, fp string, calls *int) {
	t.Helper()
	if res, err := e.store.Do(context.Background(), req(key, fp), payRun(t, e, calls, true)); err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("Do(%q, %q) = %v, %v; want executed", key, fp, res.Outcome, err)
	}
}

// payRun is a handler that writes one payment through the store's transaction
// and answers 201 with keep; it counts its calls in *calls.
func payRun(t testing.TB, e env, calls *int, keep bool) server.RunFunc {
	return func(ctx context.Context) (*server.Response, bool) {
		*calls++
		if pgstore.Tx(ctx) == nil {
			t.Error("run: no transaction in ctx")
		}
		p := paymentFor(ctx)
		if err := e.ledger.insert(ctx, p); err != nil {
			t.Errorf("run: insert: %v", err)
			return &server.Response{Status: 503}, false
		}
		return &server.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"` + p.ID + `"}`)}, keep
	}
}

func paymentFor(context.Context) payment {
	return payment{ID: "pay_" + rand.Text(), Customer: "c1", Amount: 1250, Currency: "EUR", Created: time.Now().UTC()}
}
