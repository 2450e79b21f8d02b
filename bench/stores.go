package bench

import (
	"context"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/internal/servicetest"
	"github.com/idemkit/idem/server/memstore"
)

// The baselines of section 5: the payments handler without idem.
const (
	// BaselineBare is the payments handler on the in-memory ledger, for the
	// stores that cannot share the business write's transaction (memory, Redis).
	BaselineBare = "bare handler, memory ledger"
	// BaselineOwnTx is the payments handler on the PostgreSQL ledger in a
	// transaction of its own (BEGIN, INSERT, COMMIT), on the same database as
	// the PostgreSQL store.
	BaselineOwnTx = "own transaction, PostgreSQL ledger"
)

// Where section 5 finds its servers, and the defaults.
const (
	EnvPostgresURL     = servicetest.EnvPostgresURL
	EnvRedisAddr       = servicetest.EnvRedisAddr
	DefaultPostgresURL = servicetest.DefaultPostgresURL
	DefaultRedisAddr   = servicetest.DefaultRedisAddr
)

// Store names in section 5.
const (
	StoreMemory   = "memory (server/memstore)"
	StorePostgres = "PostgreSQL (server/pgstore)"
	StoreRedis    = "Redis (server/redisstore)"
)

// ServerStores returns the stores section 5 measures: memory, PostgreSQL
// (IDEM_POSTGRES_URL) and Redis (IDEM_REDIS_ADDR).
func ServerStores() []StoreTarget {
	return []StoreTarget{
		{Name: StoreMemory, Open: openMemory},
		{Name: StorePostgres, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			return openPostgres(ctx, servicetest.PostgresURL(), workers)
		}},
		{Name: StoreRedis, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			return openRedis(ctx, servicetest.RedisAddr(), workers)
		}},
	}
}

// openMemory returns a fresh memory store; it talks to no server, so it makes
// no round trips.
func openMemory(context.Context, int) (*StoreRig, error) {
	return &StoreRig{
		Store:      memstore.New(),
		Ledger:     payments.NewMemLedger(),
		Baseline:   BaselineBare,
		RoundTrips: func() int64 { return 0 },
		Close:      func() error { return nil },
	}, nil
}

// PostgresTargetRatio is the share of its own-transaction baseline's
// throughput the PostgreSQL store is to keep for new keys; RESULTS.md says
// whether it does.
const PostgresTargetRatio = 0.60

// redisTripsTarget is the most round trips to Redis a request of kind (new key
// or replay) is to cost: two for a first request (claim, finish), one for a
// replay (claim).
func redisTripsTarget(kind string) float64 {
	if kind == CaseReplay {
		return 1
	}
	return 2
}

// meetsRedisTrips reports whether a Redis row keeps to redisTripsTarget. A
// connection opened during the row adds its handshake to the count, hence the
// allowance of 1%.
func meetsRedisTrips(r ServerLoadResult) bool {
	return r.RoundTrips >= 0 && r.RoundTrips <= 1.01*redisTripsTarget(r.Case)
}
