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
//
// The store is wrapped so that every error it returns (the cause of a 503 or
// an outcome-unknown answer) is logged on the request's line (logRequests).
func openStore(ctx context.Context, cfg config, logger *slog.Logger, tel *telemetry) (server.Store, payments.Ledger, func(), error) {
	store, ledger, cleanup, err := openBackends(ctx, cfg, logger, tel)
	if err != nil {
		return nil, nil, nil, err
	}
	return notingStore{store}, ledger, cleanup, nil
}

func openBackends(ctx context.Context, cfg config, logger *slog.Logger, tel *telemetry) (server.Store, payments.Ledger, func(), error) {
	switch cfg.store {
	case storeMemory:
		return memstore.New(memstore.WithMaxEntries(cfg.maxEntries)), payments.NewMemLedger(), func() {}, nil
	case storePostgres:
		pool, ledger, err := openPostgres(ctx, cfg.postgresURL)
		if err != nil {
			return nil, nil, nil, err
		}
		tel.observePostgres(storePostgres, pool)
		store := pgstore.New(pool)
		if err := migrate(ctx, store.Migrate); err != nil {
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
		store, rdb, err := openRedis(ctx, cfg, logger)
		if err != nil {
			return nil, nil, nil, err
		}
		tel.observeRedis(storeRedis, rdb)
		if cfg.postgresURL == "" {
			return store, payments.NewMemLedger(), func() { _ = rdb.Close() }, nil
		}
		pool, ledger, err := openPostgres(ctx, cfg.postgresURL)
		if err != nil {
			_ = rdb.Close()
			return nil, nil, nil, err
		}
		tel.observePostgres(storePostgres, pool)
		return store, ledger, func() { pool.Close(); _ = rdb.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("-store %q: %w", cfg.store, errUsage)
}

// redisClient builds the client -redis-addr and its companions describe, by
// go-redis's UniversalClient rules: -redis-master-name selects Sentinel (the
// addresses are the sentinels'), more than one address a Cluster, one address
// a single node, unless -redis-cluster makes it a Cluster seed.
func redisClient(cfg config) redis.UniversalClient {
	o := &redis.UniversalOptions{Addrs: cfg.redisAddrs(), MasterName: cfg.redisMasterName}
	if cfg.redisCluster {
		return redis.NewClusterClient(o.Cluster())
	}
	return redis.NewUniversalClient(o)
}

// openRedis connects to Redis and returns the store; it refuses a Redis whose
// eviction policy can delete records unless -redis-allow-eviction.
func openRedis(ctx context.Context, cfg config, logger *slog.Logger) (server.Store, redis.UniversalClient, error) {
	rdb := redisClient(cfg)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("-store redis: cannot reach Redis at %s: %w", cfg.redisAddr, err)
	}
	opts := []redisstore.Option{redisstore.WithLogger(logger)}
	if cfg.redisMinReplicas > 0 {
		opts = append(opts, redisstore.WithMinReplicas(cfg.redisMinReplicas, cfg.redisReplicaTimeout))
	}
	if cfg.redisAllowEviction {
		opts = append(opts, redisstore.WithEvictionAllowed())
	}
	store := redisstore.New(rdb, opts...)
	if err := store.Check(pctx); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("-store redis: %w", err)
	}
	return store, rdb, nil
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
