package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/idemkit/idem/internal/demo/payments"
	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/redisstore"
)

// Table names the demo uses in PostgreSQL: names of its own, so that it never
// touches a table it did not create (a user's payments, a service's idem_keys).
// A table of one of these names with another shape stops the start-up.
const (
	keysTable     = "idem_demo_keys"
	paymentsTable = "idem_demo_payments"
	// gatewayKeysTable holds the keys of the gateway mode (-upstream), which
	// has no payments.
	gatewayKeysTable = "idem_gateway_keys"
)

// connectTimeout bounds the first contact with PostgreSQL or Redis, so an
// unreachable store is a clear start-up error, not a hang.
const connectTimeout = 5 * time.Second

// openStore opens the idempotency store cfg names and the ledger the payments
// API writes to. cleanup releases both; call it after the server has stopped.
//
//   - memory: keys in this process; a restart forgets them.
//   - postgres: keys and payments in one database; the claim, the payment and
//     the stored response commit in one transaction.
//   - redis: keys in Redis.
//
// With memory and redis, the payments are in memory (at most -max-payments),
// or in PostgreSQL when -ledger-postgres-url is given (two systems: a crash between the payment and
// the record is the documented window).
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
		store := memstore.New(memstore.WithMaxEntries(cfg.maxEntries), memstore.WithMaxBytes(cfg.maxBytes))
		if cfg.ledgerURL == "" {
			return store, payments.NewBoundedMemLedger(cfg.maxPayments), func() {}, nil
		}
		pool, ledger, err := openPostgres(ctx, cfg.ledgerURL, "-ledger-postgres-url")
		if err != nil {
			return nil, nil, nil, err
		}
		tel.observePostgres(storePostgres, pool)
		return store, ledger, pool.Close, nil
	case storePostgres:
		var pool *pgxpool.Pool
		var ledger payments.Ledger
		var err error
		table := keysTable
		if cfg.gateway.enabled() { // no payments: the upstream is the business
			pool, err = openPool(ctx, cfg.postgresURL, "-postgres-url")
			table = gatewayKeysTable
		} else {
			pool, ledger, err = openPostgres(ctx, cfg.postgresURL, "-postgres-url")
		}
		if err != nil {
			return nil, nil, nil, err
		}
		tel.observePostgres(storePostgres, pool)
		store := pgstore.New(pool, pgstore.WithTable(table),
			pgstore.WithScopeLimits(cfg.pgScopeEntries, cfg.pgScopeBytes))
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
		if cfg.ledgerURL == "" {
			return store, payments.NewBoundedMemLedger(cfg.maxPayments), func() { _ = rdb.Close() }, nil
		}
		pool, ledger, err := openPostgres(ctx, cfg.ledgerURL, "-ledger-postgres-url")
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
	// ContextTimeoutEnabled: the store's per-call deadlines (WithOpTimeout)
	// then free the connection too, not only the caller. Maintenance
	// notifications off: Redis before 8 does not know them, and go-redis's
	// fallback from its default (auto) mode races under concurrent dials.
	o := &redis.UniversalOptions{Addrs: cfg.redisAddrs(), MasterName: cfg.redisMasterName, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}
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
	opts := []redisstore.Option{redisstore.WithLogger(logger),
		redisstore.WithScopeLimits(cfg.redisScopeEntries, cfg.redisScopeBytes)}
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

// openPostgres connects to url, given by flag, and prepares the payments
// table; a table of its name with another shape is an error that names it.
func openPostgres(ctx context.Context, url, flag string) (*pgxpool.Pool, *pgpayments.Ledger, error) {
	pool, err := openPool(ctx, url, flag)
	if err != nil {
		return nil, nil, err
	}
	ledger, err := pgpayments.New(pool, paymentsTable)
	if err == nil {
		err = migrate(ctx, ledger.Migrate)
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("%s: payments table: %w", flag, err)
	}
	return pool, ledger, nil
}

// openPool connects to url, given by flag.
func openPool(ctx context.Context, url, flag string) (*pgxpool.Pool, error) {
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
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
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w", flag, err)
	}
	return pool, nil
}

func migrate(ctx context.Context, m func(context.Context) error) error {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return m(mctx)
}
