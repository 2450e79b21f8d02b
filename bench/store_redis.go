package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server/redisstore"
)

// openRedis connects to the Redis server at addr with a pool for workers
// concurrent requests; see newRedisRig.
func openRedis(ctx context.Context, addr string, workers int) (*StoreRig, error) {
	unreachable := func(err error) error {
		return fmt.Errorf("cannot reach Redis at %s (set %s): %w", addr, EnvRedisAddr, err)
	}
	if err := dialEach(ctx, []string{addr}); err != nil {
		return nil, unreachable(err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: workers + 4})
	return newRedisRig(ctx, client, unreachable)
}

// openRedisCluster connects to the Redis Cluster whose seeds are addrs, with a
// pool for workers concurrent requests per node; see newRedisRig.
func openRedisCluster(ctx context.Context, addrs []string, workers int) (*StoreRig, error) {
	unreachable := func(err error) error {
		return fmt.Errorf("cannot reach the Redis Cluster at %s (set %s): %w", strings.Join(addrs, ","), EnvRedisClusterAddrs, err)
	}
	if err := dialEach(ctx, addrs); err != nil {
		return nil, unreachable(err)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: workers + 4})
	return newRedisRig(ctx, client, unreachable)
}

// openRedisSentinel connects to the master named master through the sentinels
// at addrs, with a pool for workers concurrent requests, and makes the store
// wait for one replica's acknowledgement of every claim and record
// (redisstore.WithMinReplicas); see newRedisRig.
func openRedisSentinel(ctx context.Context, addrs []string, master string, workers int) (*StoreRig, error) {
	unreachable := func(err error) error {
		return fmt.Errorf("cannot reach the Redis master %q through the sentinels at %s (set %s and %s): %w",
			master, strings.Join(addrs, ","), EnvRedisSentinelAddrs, EnvRedisMasterName, err)
	}
	if err := dialEach(ctx, addrs); err != nil {
		return nil, unreachable(err)
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, PoolSize: workers + 4})
	return newRedisRig(ctx, client, unreachable, redisstore.WithMinReplicas(1, sentinelReplicaTimeout))
}

// dialEach dials every address once, plainly: go-redis would retry a refused
// connection and log every failure.
func dialEach(ctx context.Context, addrs []string) error {
	dial, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, addr := range addrs {
		conn, err := (&net.Dialer{}).DialContext(dial, "tcp", addr)
		if err != nil {
			return err
		}
		_ = conn.Close()
	}
	return nil
}

// newRedisRig pings every master of client (closing it and returning
// unreachable's error when one does not answer) and returns a rig whose store
// has a key prefix of its own, whose keys Close deletes. A go-redis hook
// counts the round trips.
func newRedisRig(ctx context.Context, client redis.UniversalClient, unreachable func(error) error, opts ...redisstore.Option) (*StoreRig, error) {
	ping, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var (
		mu                sync.Mutex
		version           string
		masters, replicas int
	)
	err := forEachMaster(ping, client, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "server", "replication").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		masters++
		for line := range strings.Lines(info) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "redis_version":
				version = v
			case "connected_slaves":
				n, _ := strconv.Atoi(v)
				replicas += n
			}
		}
		return nil
	})
	if err != nil {
		_ = client.Close()
		return nil, unreachable(err)
	}
	server := "Redis " + version
	switch client.(type) {
	case *redis.ClusterClient:
		server += fmt.Sprintf(" Cluster (%d masters, %d replicas)", masters, replicas)
	default:
		if replicas > 0 {
			server += fmt.Sprintf(" (master and %d replica%s)", replicas, plural(replicas))
		}
	}
	trips := &redisTrips{}
	client.AddHook(trips)
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	prefix := "idembench:" + hex.EncodeToString(b[:]) + ":"
	return &StoreRig{
		Server:     server,
		Store:      redisstore.New(client, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...),
		Ledger:     payments.NewMemLedger(),
		Baseline:   BaselineBare,
		RoundTrips: trips.n.Load,
		Close: func() error {
			return errors.Join(deletePrefix(client, prefix), client.Close())
		},
	}, nil
}

// forEachMaster calls f with every master of client, in parallel on a
// Cluster: SCAN and INFO see one node only.
func forEachMaster(ctx context.Context, client redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, f)
	case *redis.Client:
		return f(ctx, c)
	}
	return fmt.Errorf("bench: unsupported Redis client %T", client)
}

// deletePrefix deletes every key that starts with prefix, on every master.
// Keys are unlinked one per command (in pipelines), since a Cluster refuses a
// command whose keys are in different slots.
func deletePrefix(client redis.UniversalClient, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := forEachMaster(ctx, client, func(ctx context.Context, node *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, prefix+"*", 1000).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Unlink(ctx, k)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	})
	if err != nil {
		return fmt.Errorf("delete %s*: %w", prefix, err)
	}
	return nil
}

// redisTrips is a go-redis hook that counts round trips: one per command, one
// per pipeline, the set-up of a new connection apart. go-redis sends that
// set-up (HELLO, then a pipeline of CLIENT SETINFO and the like) through the
// same hooks when it opens a connection, which a loaded machine makes it do
// in the measured time (a connection dropped after a time-out is replaced):
// it is the pool's cost, not the store's per request.
type redisTrips struct{ n atomic.Int64 }

func (t *redisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *redisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !connSetUp(cmd) {
			t.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (t *redisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !connSetUp(c) }) {
			return next(ctx, cmds) // only set-up commands: not counted
		}
		t.n.Add(1)
		return next(ctx, cmds)
	}
}

// connSetUp reports whether cmd is one that go-redis sends to set up a new
// connection, never one of the store's.
func connSetUp(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "auth", "select", "readonly", "client":
		return true
	}
	return false
}
