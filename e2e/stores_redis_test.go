package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/redisstore"
)

// openRedis returns a redisstore.Store under a key prefix of its own, whose
// keys are deleted when the test ends.
func openRedis(t *testing.T) server.Store {
	t.Helper()
	client, prefix := newRedisClient(t, "idem-e2e:", 64)
	return redisstore.New(client, redisstore.WithPrefix(prefix))
}

// newRedisClient returns a client of the test Redis with a pool of poolSize
// connections (0: go-redis's default), or skips t (fails it in CI) when there
// is none, and a new key prefix that begins with base. When the test ends, the
// keys under the prefix are deleted and the client is closed.
func newRedisClient(t *testing.T, base string, poolSize int) (*redis.Client, string) {
	t.Helper()
	addr := servicetest.RedisAddr()
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		skipOrFail(t, fmt.Sprintf("Redis not reachable at %s (%v): start redis-server there or set IDEM_REDIS_ADDR", addr, err))
	}
	prefix := base + randomSuffix() + ":"
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			if err := client.Del(ctx, iter.Val()).Err(); err != nil {
				t.Errorf("deleting %s: %v", iter.Val(), err)
				return
			}
		}
		if err := iter.Err(); err != nil {
			t.Errorf("listing the keys under %s: %v", prefix, err)
		}
	})
	return client, prefix
}
