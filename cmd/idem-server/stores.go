package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/demo/payments"
	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/redisstore"
)

// Table names the server uses in PostgreSQL.
const (
	keysTable     = "idem_keys"
	paymentsTable = "payments"
)

// connectTimeout bounds the first contact with PostgreSQL or Redis, so an
// unreachable store is a clear start-up error, not a hang.
const connectTimeout = 5 * time.Second

// openStore opens the idempotency store cfg names and the ledger the payments
// API writes to. cleanup releases both; call it after the server has stopped.
//
//   - memory: both in this process; a restart forgets everything.
//   - postgres: keys and payments in one database; the claim, the payment and
//     the stored response commit in one transaction.
//   - redis: keys in Redis; payments in PostgreSQL when -postgres-url is given
//     (two systems: a crash between the payment and the record is the
//     documented window) and in memory otherwise.
func openStore(ctx context.Context, cfg config, logger *slog.Logger) (server.Store, payments.Ledger, func(), error) {
	switch cfg.store {
	case storeMemory:
		return memstore.New(memstore.WithMaxEntries(cfg.maxEntries)), payments.NewMemLedger(), func() {}, nil
	case storePostgres:
		pool, ledger, err := openPostgres(ctx, cfg.postgresURL)
		if err != nil {
			return nil, nil, nil, err
		}
		store, err := pgstore.New(pool)
		if err == nil {
			err = migrate(ctx, store.Migrate)
		}
		if err != nil {
			pool.Close()
			return nil, nil, nil, fmt.Errorf("-store postgres: %w", err)
		}
		stop := store.StartReaper(ctx, pgstore.Reaper{Report: func(n int64, err error) {
			if err != nil {
				logger.Warn("deleting expired keys", "err", err)
			} else if n > 0 {
				logger.Info("deleted expired keys", "rows", n)
			}
		}})
		return store, ledger, func() { stop(); pool.Close() }, nil
	case storeRedis:
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{cfg.redisAddr}})
		pctx, cancel := context.WithTimeout(ctx, connectTimeout)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			_ = rdb.Close()
			return nil, nil, nil, fmt.Errorf("-store redis: cannot reach Redis at %s: %w", cfg.redisAddr, err)
		}
		store := redisstore.New(rdb)
		if cfg.postgresURL == "" {
			return store, payments.NewMemLedger(), func() { _ = rdb.Close() }, nil
		}
		pool, ledger, err := openPostgres(ctx, cfg.postgresURL)
		if err != nil {
			_ = rdb.Close()
			return nil, nil, nil, err
		}
		return store, ledger, func() { pool.Close(); _ = rdb.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("-store %q: %w", cfg.store, errUsage)
}

// openPostgres connects to url and prepares the payments table.
func openPostgres(ctx context.Context, url string) (*pgxpool.Pool, *pgpayments.Ledger, error) {
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return nil, nil, fmt.Errorf("-postgres-url: %w", err)
	}
	// NewPool connects once to pick a query mode that also works through
	// PgBouncer's transaction pooling.
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	pool, err := pgstore.NewPool(pctx, url)
	if err == nil {
		err = pool.Ping(pctx)
		if err != nil {
			pool.Close()
		}
	}
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach PostgreSQL at -postgres-url: %w", err)
	}
	ledger, err := pgpayments.New(pool, paymentsTable)
	if err == nil {
		err = migrate(ctx, ledger.Migrate)
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("payments table: %w", err)
	}
	return pool, ledger, nil
}

func migrate(ctx context.Context, m func(context.Context) error) error {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return m(mctx)
}
