package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
)

// binaryStore is a store the idem-server binary runs on in these tests.
type binaryStore struct {
	name string
	// args returns the flags that put a fresh idem-server on the store (a
	// schema or keys of its own, removed when the test ends); it skips the
	// test, or fails it with IDEM_REQUIRE_SERVICES=1, when the service cannot
	// be reached. forget, called with each idempotency key the test sends,
	// removes what the store keeps for it when the test ends.
	args func(t *testing.T) (args []string, forget func(key string))
}

// binaryStores are the stores of IDEM_POSTGRES_URL and IDEM_REDIS_ADDR, and
// memory.
var binaryStores = []binaryStore{
	{"memory", func(*testing.T) ([]string, func(string)) {
		return []string{"-store", "memory"}, func(string) {}
	}},
	{"postgres", func(t *testing.T) ([]string, func(string)) {
		return []string{"-store", "postgres", "-postgres-url", postgresSchema(t)}, func(string) {}
	}},
	{"redis", func(t *testing.T) ([]string, func(string)) {
		addr, forget := sharedRedis(t)
		return []string{"-store", "redis", "-redis-addr", addr}, forget
	}},
}

// postgresSchema creates a schema of its own in IDEM_POSTGRES_URL's database,
// dropped with everything in it when the test ends (after the server, whose
// cleanup is registered later, has stopped), and returns the URL whose
// search_path puts idem-server's fixed tables (idem_demo_keys, idem_demo_payments) there.
func postgresSchema(t *testing.T) string {
	t.Helper()
	dsn := servicetest.PostgresURL()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		skipOrFail(t, fmt.Sprintf("PostgreSQL not reachable at %s (%v): start PostgreSQL there or set IDEM_POSTGRES_URL", dsn, err))
	}
	schema := "e2e_bin_" + randomSuffix()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	_ = conn.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return withSearchPath(t, dsn, schema)
}

// withSearchPath adds search_path=schema to a PostgreSQL URL or keyword/value
// connection string.
func withSearchPath(t *testing.T, dsn, schema string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("IDEM_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// sharedRedis returns IDEM_REDIS_ADDR and a function that deletes, when the
// test ends, every Redis key that holds the idempotency key it is given (the
// server writes under its default prefix, so the test's keys are found by
// their own random names).
func sharedRedis(t *testing.T) (string, func(key string)) {
	t.Helper()
	addr := servicetest.RedisAddr()
	client := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		skipOrFail(t, fmt.Sprintf("Redis not reachable at %s (%v): start redis-server there or set IDEM_REDIS_ADDR", addr, err))
	}
	var (
		mu   sync.Mutex
		keys []string
	)
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			iter := client.Scan(ctx, 0, "*"+escapeGlob(k)+"*", 1000).Iterator()
			for iter.Next(ctx) {
				if err := client.Del(ctx, iter.Val()).Err(); err != nil {
					t.Errorf("deleting %s: %v", iter.Val(), err)
				}
			}
			if err := iter.Err(); err != nil {
				t.Errorf("listing the keys of %s: %v", k, err)
			}
		}
	})
	return addr, func(key string) {
		if key != "" {
			mu.Lock()
			keys = append(keys, key)
			mu.Unlock()
		}
	}
}

// escapeGlob escapes the characters Redis's MATCH treats as a pattern.
func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}
