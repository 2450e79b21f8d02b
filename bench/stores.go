package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/internal/testkit/servicetest"
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
	// BaselineOwnTxPgBouncer is BaselineOwnTx through the same PgBouncer as the
	// store behind it, so that its ratio is the cost of idem on that topology.
	BaselineOwnTxPgBouncer = "own transaction, PostgreSQL ledger, through PgBouncer"
)

// Where section 5 finds its servers, and the defaults.
const (
	EnvPostgresURL     = servicetest.EnvPostgresURL
	EnvRedisAddr       = servicetest.EnvRedisAddr
	DefaultPostgresURL = servicetest.DefaultPostgresURL
	DefaultRedisAddr   = servicetest.DefaultRedisAddr

	// The optional topologies: a store whose variables are unset is not
	// measured, and RESULTS.md says so.
	EnvPgBouncerURL       = servicetest.EnvPgBouncerURL
	EnvRedisClusterAddrs  = servicetest.EnvRedisClusterAddrs
	EnvRedisSentinelAddrs = servicetest.EnvRedisSentinelAddrs
	EnvRedisMasterName    = servicetest.EnvRedisMasterName
)

// How to get the optional topologies, for the skip messages.
const (
	howToRedisTopologies = "run `.ci/redis-topologies.sh start` and `eval \"$(.ci/redis-topologies.sh print-env)\"`"
	howToPgBouncer       = "run `export " + EnvPgBouncerURL + "=\"$(.ci/pgbouncer.sh start)\"`"
)

// Store names in section 5.
const (
	StoreMemory   = "memory (server/memstore)"
	StorePostgres = "PostgreSQL (server/pgstore)"
	StoreRedis    = "Redis (server/redisstore)"

	StoreRedisCluster  = "Redis Cluster (server/redisstore)"
	StoreRedisSentinel = "Redis Sentinel, WAIT 1 (server/redisstore)"
	StorePgBouncer     = "PostgreSQL through PgBouncer (server/pgstore)"

	// StorePostgresFloor is not a store: the record alone, without the
	// store's claim (floorStore), what any store that writes the response in
	// the business write's transaction costs at least.
	StorePostgresFloor = "PostgreSQL, the record alone (no claim: a floor, not a store)"
)

// sentinelReplicaTimeout is how long the Sentinel row's store waits for its
// replica's acknowledgement (redisstore.WithMinReplicas(1, …)).
const sentinelReplicaTimeout = time.Second

// ServerStores returns the stores section 5 measures: memory, PostgreSQL
// (IDEM_POSTGRES_URL) with its floor (StorePostgresFloor) and Redis
// (IDEM_REDIS_ADDR); and the topologies whose
// variables are set: a Redis Cluster (IDEM_REDIS_CLUSTER_ADDRS), a Redis
// Sentinel set with WAIT 1 (IDEM_REDIS_SENTINEL_ADDRS, IDEM_REDIS_MASTER_NAME)
// and PostgreSQL through PgBouncer in transaction pooling mode
// (IDEM_PGBOUNCER_URL).
func ServerStores() []StoreTarget {
	return []StoreTarget{
		{Name: StoreMemory, Open: openMemory},
		{Name: StorePostgres, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			return openPostgres(ctx, pgTarget{url: servicetest.PostgresURL(), env: EnvPostgresURL, name: "PostgreSQL", baseline: BaselineOwnTx}, workers)
		}},
		{Name: StorePostgresFloor, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			return openPostgres(ctx, pgTarget{url: servicetest.PostgresURL(), env: EnvPostgresURL, name: "PostgreSQL", baseline: BaselineOwnTx, floor: true}, workers)
		}},
		{Name: StoreRedis, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			return openRedis(ctx, servicetest.RedisAddr(), workers)
		}},
		{Name: StoreRedisCluster, Env: []string{EnvRedisClusterAddrs}, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			addrs, err := optional(EnvRedisClusterAddrs, howToRedisTopologies)
			if err != nil {
				return nil, err
			}
			return openRedisCluster(ctx, addrs, workers)
		}},
		{Name: StoreRedisSentinel, Env: []string{EnvRedisSentinelAddrs, EnvRedisMasterName}, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			addrs, err := optional(EnvRedisSentinelAddrs, howToRedisTopologies)
			if err != nil {
				return nil, err
			}
			master, err := optional(EnvRedisMasterName, howToRedisTopologies)
			if err != nil {
				return nil, err
			}
			return openRedisSentinel(ctx, addrs, master[0], workers)
		}},
		{Name: StorePgBouncer, Env: []string{EnvPgBouncerURL}, Open: func(ctx context.Context, workers int) (*StoreRig, error) {
			url, err := optional(EnvPgBouncerURL, howToPgBouncer)
			if err != nil {
				return nil, err
			}
			return openPostgres(ctx, pgTarget{url: url[0], env: EnvPgBouncerURL, name: "PgBouncer", baseline: BaselineOwnTxPgBouncer}, workers)
		}},
	}
}

// ErrNotSet is wrapped by Open's error when a topology's variable is unset:
// the store is not measured, but nothing is wrong.
var ErrNotSet = errors.New("not set")

// optional returns the comma-separated list in the variable env, or an error
// wrapping ErrNotSet that says how to get one.
func optional(env, howto string) ([]string, error) {
	v := os.Getenv(env)
	if v == "" {
		return nil, fmt.Errorf("%s is %w: %s", env, ErrNotSet, howto)
	}
	return strings.Split(v, ","), nil
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
