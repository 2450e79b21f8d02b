package pgstore_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// roundTrips counts the queries and the batches a pool's connections send; each
// is one round trip once the connection's statement cache is warm.
type roundTrips struct{ queries, batches atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (*roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}

func (*roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (*roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *roundTrips) reset() { c.queries.Store(0); c.batches.Store(0) }

// tracedEnv is an env on a one-connection pool whose round trips are counted.
func tracedEnv(t *testing.T) (env, *roundTrips) {
	t.Helper()
	pgtest.Pool(t, 1) // skips (or fails) the test when PostgreSQL is not reachable
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newEnvOn(t, pool, pgtest.Table(t, pool, "idem_test"), pgtest.Table(t, pool, "pay_test")), rt
}

func TestDoRoundTripCount(t *testing.T) {
	t.Parallel()
	e, rt := tracedEnv(t)
	ctx := context.Background()
	calls := 0
	run := payRun(t, e, &calls, true)
	// Warm the connection's statement cache: its first batch also prepares.
	if _, err := e.store.Do(ctx, req("warm", "fp"), run); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                  string
		key                   string
		want                  server.Outcome
		wantBatches, wantQrys int64
	}{
		// BEGIN with the claim; the handler's INSERT; the record with COMMIT.
		{"first request", "k", server.OutcomeExecuted, 2, 1},
		// BEGIN with the claim and the read; ROLLBACK.
		{"replay", "k", server.OutcomeReplayed, 1, 1},
	}
	for _, tt := range tests { // sequential: the cases share the key
		rt.reset()
		res, err := e.store.Do(ctx, req(tt.key, "fp"), run)
		if err != nil || res.Outcome != tt.want {
			t.Fatalf("%s: Do = %v, %v; want %v", tt.name, res.Outcome, err, tt.want)
		}
		if b, q := rt.batches.Load(), rt.queries.Load(); b != tt.wantBatches || q != tt.wantQrys {
			t.Errorf("%s: %d batches and %d queries; want %d and %d", tt.name, b, q, tt.wantBatches, tt.wantQrys)
		}
	}
}

func TestDoHandlerSavepoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	res, err := e.store.Do(ctx, req("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
		if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
			t.Errorf("insert: %v", err)
		}
		sp, err := pgstore.Tx(ctx).Begin(ctx) // a savepoint in the store's transaction
		if err != nil {
			t.Errorf("savepoint: %v", err)
			return &server.Response{Status: http.StatusServiceUnavailable}, false
		}
		if err := e.ledger.insert(pgstore.ContextWithTx(ctx, sp), paymentFor(ctx)); err != nil {
			t.Errorf("insert in savepoint: %v", err)
		}
		if err := sp.Rollback(ctx); err != nil {
			t.Errorf("rollback to savepoint: %v", err)
		}
		return &server.Response{Status: http.StatusCreated}, true
	})
	if err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("Do = %v, %v; want executed", res.Outcome, err)
	}
	if n := e.count(t); n != 1 {
		t.Fatalf("%d payments; want 1: the savepoint's insert rolled back, the other committed", n)
	}
}
