package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server/storetest"
)

// The topology tests run when their variables are set (.ci/redis-topologies.sh
// start prints them): a Redis Cluster (IDEM_REDIS_CLUSTER_ADDRS) and a Sentinel
// set (IDEM_REDIS_SENTINEL_ADDRS, IDEM_REDIS_MASTER_NAME). Set but unreachable,
// they fail under IDEM_REQUIRE_SERVICES=1 and skip otherwise.

const topologyHowTo = "run .ci/redis-topologies.sh start and export what .ci/redis-topologies.sh print-env prints"

// clusterClient returns a client of the test Cluster, closed at cleanup.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := servicetest.Optional(t, servicetest.EnvRedisClusterAddrs, topologyHowTo)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 32})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
	if err != nil {
		skipOrFail(t, "Redis Cluster not reachable at %v (%v): %s", addrs, err, topologyHowTo)
	}
	return c
}

// sentinelOptions returns the options of a client of the test Sentinel set's
// master (skipping or failing the test when they are not set).
func sentinelOptions(t testing.TB) *redis.FailoverOptions {
	t.Helper()
	addrs := servicetest.Optional(t, servicetest.EnvRedisSentinelAddrs, topologyHowTo)
	name := servicetest.Optional(t, servicetest.EnvRedisMasterName, topologyHowTo)
	return &redis.FailoverOptions{MasterName: name[0], SentinelAddrs: addrs, PoolSize: 32}
}

// sentinelClient returns a failover client of the test Sentinel set's master.
func sentinelClient(t testing.TB) *redis.Client {
	t.Helper()
	o := sentinelOptions(t)
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		skipOrFail(t, "Redis Sentinel master %q not reachable through %v (%v): %s", o.MasterName, o.SentinelAddrs, err, topologyHowTo)
	}
	return c
}

func runContract(t *testing.T, c redis.UniversalClient, opts ...Option) {
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		prefix := testPrefix(t, c)
		return storetest.Fixture{
			Store:   New(c, append([]Option{WithPrefix(prefix)}, opts...)...),
			Advance: func(d time.Duration) { advance(t, c, prefix, d) },
		}
	})
}

// TestContractCluster: the contract suite over a 3-master Redis Cluster; every
// script touches one key, so no CROSSSLOT, and the helpers scan every master.
func TestContractCluster(t *testing.T) {
	t.Parallel()
	runContract(t, clusterClient(t))
}

// TestContractSentinel: the contract suite through Sentinel, with and without
// the durability option (the replica must acknowledge each claim and record).
func TestContractSentinel(t *testing.T) {
	t.Parallel()
	c := sentinelClient(t)
	waitFailoverReady(t, sentinelOptions(t)) // TestSentinelFailover may have just moved the master
	t.Run("async", func(t *testing.T) { t.Parallel(); runContract(t, c) })
	t.Run("min replicas 1", func(t *testing.T) { t.Parallel(); runContract(t, c, WithMinReplicas(1, 2*time.Second)) })
}

// On a Cluster, WithMinReplicas WAITs on the master that owns the key; the
// test Cluster has no replicas, so every claim is refused (and released)
// before the handler runs.
func TestClusterMinReplicasWaitsOnTheKeysMaster(t *testing.T) {
	t.Parallel()
	c := clusterClient(t)
	s := New(c, WithPrefix(testPrefix(t, c)), WithMinReplicas(1, 50*time.Millisecond))
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} { // keys on several masters
		_, err := s.Do(context.Background(), req(k, "fp"), neverRun(t))
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("Do(%q): %v, want ErrNotReplicated", k, err)
		}
		if n := c.Exists(context.Background(), s.key("tenant-a", k)).Val(); n != 0 {
			t.Fatalf("the unacknowledged claim of %q was left in Redis", k)
		}
	}
}
