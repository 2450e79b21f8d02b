package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server/redisstore"
)

// openRedis connects to addr with a pool for workers concurrent requests and
// a key prefix of its own, whose keys Close deletes. A go-redis hook counts
// the round trips.
func openRedis(ctx context.Context, addr string, workers int) (*StoreRig, error) {
	ping, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	unreachable := func(err error) error {
		return fmt.Errorf("cannot reach Redis at %s (set %s): %w", addr, EnvRedisAddr, err)
	}
	// A plain dial first: go-redis would retry a refused connection and log
	// every failure.
	conn, err := (&net.Dialer{}).DialContext(ping, "tcp", addr)
	if err != nil {
		return nil, unreachable(err)
	}
	_ = conn.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: workers + 4})
	if err := client.Ping(ping).Err(); err != nil {
		_ = client.Close()
		return nil, unreachable(err)
	}
	info, err := client.Info(ping, "server").Result()
	if err != nil {
		_ = client.Close()
		return nil, unreachable(err)
	}
	version := "Redis"
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version += " " + v
		}
	}
	trips := &redisTrips{}
	client.AddHook(trips)
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	prefix := "idembench:" + hex.EncodeToString(b[:]) + ":"
	return &StoreRig{
		Server:     version,
		Store:      redisstore.New(client, redisstore.WithPrefix(prefix)),
		Ledger:     payments.NewMemLedger(),
		Baseline:   BaselineBare,
		RoundTrips: trips.n.Load,
		Close: func() error {
			return errors.Join(deletePrefix(client, prefix), client.Close())
		},
	}, nil
}

// deletePrefix deletes every key that starts with prefix.
func deletePrefix(client *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return fmt.Errorf("scan %s*: %w", prefix, err)
		}
		if len(keys) > 0 {
			if err := client.Unlink(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("unlink %s*: %w", prefix, err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// redisTrips is a go-redis hook that counts round trips: one per command, one
// per pipeline.
type redisTrips struct{ n atomic.Int64 }

func (t *redisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *redisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmd)
	}
}

func (t *redisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmds)
	}
}
