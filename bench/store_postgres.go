package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// pgTarget is where openPostgres connects: url, configured by the variable
// env; name says what is reached there (PostgreSQL, PgBouncer) and baseline
// names the rig's baseline rows. With floor, the rig's store is floorStore
// on the store's table, not the store.
type pgTarget struct {
	url, env, name, baseline string
	floor                    bool
}

// openPostgres connects to t.url with a pool for workers concurrent requests
// (each holds a connection for its whole transaction), configured by
// pgstore.ConfigurePool as a user of PgBouncer is told to, and creates a
// records table and a payments table of its own, which Close drops.
func openPostgres(ctx context.Context, t pgTarget, workers int) (*StoreRig, error) {
	cfg, err := pgxpool.ParseConfig(t.url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.env, err)
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	unreachable := func(err error) error {
		return fmt.Errorf("cannot reach %s at %s (set %s): %w", t.name, where, t.env, err)
	}
	cfg.MaxConns = int32(workers + 4)
	trips := &pgTrips{}
	cfg.ConnConfig.Tracer = trips
	dial, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pgstore.ConfigurePool(dial, cfg); err != nil {
		return nil, unreachable(err)
	}
	pool, err := pgxpool.NewWithConfig(dial, cfg)
	if err == nil {
		err = pool.Ping(dial)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, unreachable(err)
	}
	suffix := strings.ToLower(rand.Text()[:12])
	keys, pays := "idem_bench_keys_"+suffix, "idem_bench_pay_"+suffix
	closeRig := func() error {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{keys}.Sanitize()+", "+pgx.Identifier{pays}.Sanitize())
		if err != nil {
			return fmt.Errorf("drop %s, %s: %w", keys, pays, err)
		}
		return nil
	}
	store := pgstore.New(pool, pgstore.WithTable(keys))
	var rigStore server.Store = store
	if t.floor {
		rigStore = newFloorStore(pool, keys)
	}
	ledger, err := pgpayments.New(pool, pays)
	if err != nil {
		return nil, errors.Join(err, closeRig())
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := store.Migrate(mctx); err != nil {
		return nil, errors.Join(err, closeRig())
	}
	if err := ledger.Migrate(mctx); err != nil {
		return nil, errors.Join(err, closeRig())
	}
	var version string
	if err := pool.QueryRow(mctx, "SELECT current_setting('server_version')").Scan(&version); err != nil {
		return nil, errors.Join(err, closeRig())
	}
	server := "PostgreSQL " + version
	if t.name != "PostgreSQL" {
		server += " through " + t.name
	}
	return &StoreRig{
		Server:       server,
		Store:        rigStore,
		Ledger:       ledger,
		Baseline:     t.baseline,
		WrapBaseline: func(h http.Handler) http.Handler { return ownTx(pool, h) },
		RoundTrips:   trips.n.Load,
		Close:        closeRig,
	}, nil
}

// ownTx is the PostgreSQL baseline: next (the payments handler) in a
// transaction of its own, without idem. It begins a transaction, hands it to
// next through pgstore.ContextWithTx (so the ledger writes through it, as it
// does through the store's), buffers the response and commits before sending
// it, or rolls back on a 5xx, as the store does.
func ownTx(pool *pgxpool.Pool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pool.Begin(r.Context())
		if err != nil {
			http.Error(w, "begin: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		end := context.WithoutCancel(r.Context())
		defer func() { _ = tx.Rollback(end) }() // after Commit, a no-op
		buf := &bufferedResponse{header: http.Header{}}
		next.ServeHTTP(buf, r.WithContext(pgstore.ContextWithTx(r.Context(), tx)))
		if buf.status >= 500 {
			_ = tx.Rollback(end)
		} else if err := tx.Commit(end); err != nil {
			http.Error(w, "commit: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		for k, v := range buf.header {
			w.Header()[k] = v
		}
		w.WriteHeader(buf.status)
		_, _ = w.Write(buf.body.Bytes())
	})
}

// bufferedResponse holds a handler's response until the transaction ends.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// pgTrips counts the round trips pgx makes: a statement (Exec, Query, and so
// BEGIN, COMMIT and ROLLBACK), a batch (pipelined: one round trip) or a
// prepare. A batch of statements not yet prepared on its connection costs
// one more, which the warm-up absorbs.
type pgTrips struct{ n atomic.Int64 }

func (t *pgTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *pgTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *pgTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *pgTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *pgTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *pgTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *pgTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}
