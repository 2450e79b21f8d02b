package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
)

// The tests run against a real Redis: IDEM_REDIS_ADDR (default 127.0.0.1:6379).
// Without one they skip, unless IDEM_REQUIRE_SERVICES=1 makes that a failure.

func redisAddr() string { return servicetest.RedisAddr() }

// skipOrFail skips the test (or fails it when services are required).
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	servicetest.Unreachable(t, format, args...)
}

var (
	sharedOnce   sync.Once
	sharedClient *redis.Client
	sharedErr    error
)

// newClient returns a new client of the test Redis, closed at cleanup. Tests
// that add hooks use their own; others use sharedRedis.
func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		skipOrFail(t, "Redis not reachable at %s (%v): start redis-server or set IDEM_REDIS_ADDR", redisAddr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sharedRedis returns one client shared by the tests that need no hooks.
func sharedRedis(t testing.TB) *redis.Client {
	t.Helper()
	sharedOnce.Do(func() {
		sharedClient = redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 64})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sharedErr = sharedClient.Ping(ctx).Err()
	})
	if sharedErr != nil {
		skipOrFail(t, "Redis not reachable at %s (%v): start redis-server or set IDEM_REDIS_ADDR", redisAddr(), sharedErr)
	}
	return sharedClient
}

// testPrefix returns a random key prefix whose keys are deleted at cleanup.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	p := "idemtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { deletePrefix(t, c, p) })
	return p
}

func deletePrefix(t testing.TB, c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := scanEach(ctx, c, prefix, func(node *redis.Client, key string) error {
		return node.Del(ctx, key).Err()
	})
	if err != nil {
		t.Errorf("cleanup of %q: %v", prefix, err)
	}
}

// scanEach calls f with every key under prefix and the node that holds it:
// SCAN sees one node's keys only, so on a Cluster it runs on every master.
func scanEach(ctx context.Context, c redis.UniversalClient, prefix string, f func(node *redis.Client, key string) error) error {
	scan := func(ctx context.Context, node *redis.Client) error {
		it := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			if err := f(node, it.Val()); err != nil {
				return fmt.Errorf("%q: %w", it.Val(), err)
			}
		}
		return it.Err()
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, scan)
	case *redis.Client:
		return scan(ctx, c)
	}
	return fmt.Errorf("scanEach: unsupported client %T", c)
}

// newTestStore returns a store on the shared client under a fresh prefix.
func newTestStore(t testing.TB, opts ...Option) (*Store, *redis.Client) {
	t.Helper()
	c := sharedRedis(t)
	s := New(c, append([]Option{WithPrefix(testPrefix(t, c))}, opts...)...)
	return s, c
}

// advanceScript moves one finished record's expiry ARGV[1] milliseconds
// closer, deleting it when that reaches zero. Claims (second byte 'c'), keys
// without expiry and the scopes' usage hashes are left alone; see advance.
var advanceScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 2, 2) == 'c' then return 0 end
local t = redis.call('PTTL', KEYS[1])
if t < 0 then return 0 end
if t <= tonumber(ARGV[1]) then return redis.call('DEL', KEYS[1]) end
return redis.call('PEXPIRE', KEYS[1], t - tonumber(ARGV[1]))
`)

// advance moves the store's notion of time forward by d for the contract
// suite: the PTTL of every finished record under prefix is reduced by d, and
// the records that reach 0 are deleted. Claims are left as they are: in these
// in-process tests every claim belongs to a Do that is still running, whose
// lease renewals would have kept it alive through any d (a claim whose owner
// is gone expires in real time; TestLostLeaseCannotOverwriteNewerOwner and the
// restart tests cover that).
func advance(t testing.TB, c redis.UniversalClient, prefix string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := scanEach(ctx, c, prefix, func(node *redis.Client, key string) error {
		return advanceScript.Run(ctx, node, []string{key}, d.Milliseconds()).Err()
	})
	if err != nil {
		t.Fatalf("advance %q: %v", prefix, err)
	}
}

// req returns a request with generous TTLs.
func req(key, fingerprint string) server.Request {
	return server.Request{Scope: "tenant-a", Key: key, Fingerprint: fingerprint, TTL: time.Hour, LockTTL: 10 * time.Second}
}

func response(status int, body string) *server.Response {
	return &server.Response{Status: status, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(body)}
}

// respond returns a RunFunc answering resp (kept) and counting its calls.
func respond(calls *int, resp *server.Response) server.RunFunc {
	return func(context.Context) (*server.Response, bool) {
		*calls++
		return resp, true
	}
}

func mustDo(t testing.TB, s *Store, r server.Request, run server.RunFunc) server.Result {
	t.Helper()
	res, err := s.Do(context.Background(), r, run)
	if err != nil {
		t.Fatalf("Do(%q): %v", r.Key, err)
	}
	return res
}

func isNotRecorded(err error) bool { return errors.Is(err, server.ErrNotRecorded) }

func neverRun(t testing.TB) server.RunFunc {
	return func(context.Context) (*server.Response, bool) {
		t.Error("run called, want not called")
		return nil, false
	}
}

// quietLogger drops go-redis's own log lines (dial failures are expected in
// the tests that stop a Redis server).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }
