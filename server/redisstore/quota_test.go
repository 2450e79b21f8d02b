package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/server"
)

// TestScopeFloodLeavesOtherScopesServed: one scope that floods new keys
// stops at its share, and another scope keeps being served, on a Redis whose
// maxmemory (noeviction) the flood would otherwise fill (issue 27: one token's
// flood took used_memory from 0.94 to 105.5 MB, and once maxmemory was reached
// every other tenant got 503).
func TestScopeFloodLeavesOtherScopesServed(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t, "--maxmemory", "6mb", "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	const share = 800
	s := New(c, WithScopeLimits(share, 4<<20))
	body := strings.Repeat("x", 2048)
	do := func(scope, key string) error {
		r := req(key, "fp")
		r.Scope = scope
		_, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			return response(201, body), true
		})
		return err
	}
	var flooded, refused int
	for i := range 6000 {
		err := do("flood", fmt.Sprintf("k%d", i))
		switch {
		case err == nil:
			flooded++
		case errors.Is(err, ErrScopeFull):
			refused++
		default:
			t.Fatalf("the flood's request %d: %v, want nil or ErrScopeFull", i, err)
		}
	}
	if flooded != share {
		t.Errorf("the flooding scope recorded %d keys, want its share, %d (one request at a time)", flooded, share)
	}
	// Its finished keys are still replayed.
	if err := do("flood", "k0"); err != nil {
		t.Errorf("a replay of the flooding scope: %v", err)
	}
	for i := range 100 {
		if err := do("other", fmt.Sprintf("k%d", i)); err != nil {
			t.Fatalf("another scope's request %d after the flood: %v", i, err)
		}
	}
}

// floodScope sends n new keys of scope through s, one at a time, and returns
// how many were recorded; every other answer must be ErrScopeFull.
func floodScope(t *testing.T, s *Store, scope string, from, n int, body string) int {
	t.Helper()
	recorded := 0
	for i := from; i < from+n; i++ {
		r := req(fmt.Sprintf("k%d", i), "fp")
		r.Scope = scope
		_, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			return response(201, body), true
		})
		switch {
		case err == nil:
			recorded++
		case !errors.Is(err, ErrScopeFull):
			t.Fatalf("%s's request %d: %v, want nil or ErrScopeFull", scope, i, err)
		}
	}
	return recorded
}

// TestScopeLimitsAreSharedByInstances: the share is counted in Redis, so two
// processes (two Stores on one prefix) share it: past it on one, the other
// records at most the one key it sends before it learns of it; the bytes
// bound holds as the entries bound does; and every topology counts alike
// (a Cluster puts a scope's usage and its records on different masters;
// WithMinReplicas charges in the record's pipeline, before its WAIT).
func TestScopeLimitsAreSharedByInstances(t *testing.T) {
	t.Parallel()
	topologies := []struct {
		name   string
		client func(*testing.T) redis.UniversalClient
		opts   []Option
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return sharedRedis(t) }, nil},
		{"cluster", func(t *testing.T) redis.UniversalClient { return clusterClient(t) }, nil},
		// The record, its charge and its WAIT on one connection.
		{"sentinel, min replicas 1", func(t *testing.T) redis.UniversalClient { return sentinelClient(t) },
			[]Option{WithMinReplicas(1, 2*time.Second)}},
	}
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			t.Parallel()
			c := tp.client(t)
			prefix := testPrefix(t, c)
			opts := append([]Option{WithPrefix(prefix)}, tp.opts...)
			one := New(c, append(opts, WithScopeLimits(50, 1<<30))...)
			two := New(c, append(opts, WithScopeLimits(50, 1<<30))...)
			if n := floodScope(t, one, "a", 0, 80, "x"); n != 50 {
				t.Fatalf("instance one recorded %d keys of a, want its share, 50", n)
			}
			if n := floodScope(t, two, "a", 80, 20, "x"); n > 1 {
				t.Errorf("instance two recorded %d keys of a past its share, want at most 1", n)
			}
			if n := floodScope(t, two, "b", 0, 10, "x"); n != 10 {
				t.Errorf("instance two recorded %d of scope b's 10 keys, want all", n)
			}
			// The bytes bound: 4 KiB bodies, 40 KiB for the scope.
			bytes := New(c, append(opts, WithScopeLimits(1000, 40<<10))...)
			if n := floodScope(t, bytes, "c", 0, 30, strings.Repeat("y", 4<<10)); n < 8 || n > 10 {
				t.Errorf("scope c recorded %d records of 4 KiB under a 40 KiB bound, want 8 to 10", n)
			}
		})
	}
}

// TestScopeUsageExpiresWithTheRecords: once a scope's records expire, its
// usage does too, and the scope is served again.
func TestScopeUsageExpiresWithTheRecords(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t, WithScopeLimits(5, 1<<30))
	do := func(key string) error {
		r := req(key, "fp")
		r.Scope, r.TTL = "short", time.Second
		_, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) { return response(201, "x"), true })
		return err
	}
	for i := range 5 {
		if err := do(fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := do("k5"); !errors.Is(err, ErrScopeFull) {
		t.Fatalf("a sixth key: %v, want ErrScopeFull", err)
	}
	// The records live 1 s, and their usage one bucket (1 s) more; the
	// refusal is cached for usageRefresh (1 s).
	deadline := time.Now().Add(10 * time.Second)
	for err := do("k6"); err != nil; err = do("k6") {
		if !errors.Is(err, ErrScopeFull) || time.Now().After(deadline) {
			t.Fatalf("after the records expired: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling for Redis's clock to pass the bucket's end
	}
	if n := c.HLen(context.Background(), s.usageKey("short")).Val(); n > 4 {
		t.Errorf("the usage hash holds %d fields, want the live buckets only", n)
	}
}
