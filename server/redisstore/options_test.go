package redisstore

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// requirePanic fails t unless f panics with exactly want.
func requirePanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if got := recover(); got != want {
			t.Fatalf("panic = %#v; want %q", got, want)
		}
	}()
	f()
}

// TestOptionsPanicWhenMade: an impossible value panics when the option is
// made, naming the option and what it wants, before any New.
func TestOptionsPanicWhenMade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		make func() Option
		want string
	}{
		{"empty prefix", func() Option { return WithPrefix("") }, `redisstore: WithPrefix(""): want a non-empty prefix`},
		{"zero renew interval", func() Option { return WithRenewInterval(0) }, "redisstore: WithRenewInterval(0s): want a positive interval"},
		{"negative renew interval", func() Option { return WithRenewInterval(-time.Second) }, "redisstore: WithRenewInterval(-1s): want a positive interval"},
		{"zero op timeout", func() Option { return WithOpTimeout(0) }, "redisstore: WithOpTimeout(0s): want a positive timeout"},
		{"negative op timeout", func() Option { return WithOpTimeout(-time.Second) }, "redisstore: WithOpTimeout(-1s): want a positive timeout"},
		{"zero replicas", func() Option { return WithMinReplicas(0, time.Second) }, "redisstore: WithMinReplicas(0, 1s): want n >= 1 and a positive timeout"},
		{"zero replica timeout", func() Option { return WithMinReplicas(1, 0) }, "redisstore: WithMinReplicas(1, 0s): want n >= 1 and a positive timeout"},
		{"nil logger", func() Option { return WithLogger(nil) }, "redisstore: WithLogger(nil): want a *slog.Logger"},
		{"zero scope entries", func() Option { return WithScopeLimits(0, 1) }, "redisstore: WithScopeLimits(0, 1): want both at least 1"},
		{"zero scope bytes", func() Option { return WithScopeLimits(1, 0) }, "redisstore: WithScopeLimits(1, 0): want both at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requirePanic(t, tt.want, func() { tt.make() })
		})
	}
}

// TestOptionsValidValues: the boundary values are accepted and applied.
func TestOptionsValidValues(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	logger := slog.New(slog.DiscardHandler)
	s := New(c, WithPrefix("p:"), WithRenewInterval(time.Nanosecond), WithOpTimeout(time.Nanosecond),
		WithMinReplicas(1, time.Nanosecond), WithEvictionAllowed(), WithLogger(logger), WithScopeLimits(1, 1))
	want := config{prefix: "p:", renewInterval: time.Nanosecond, opTimeout: time.Nanosecond, minReplicas: 1,
		replicaTimeout: time.Nanosecond, settleReplicasFor: defaultSettleReplicasFor, evictionAllowed: true, logger: logger,
		scopeMaxEntries: 1, scopeMaxBytes: 1}
	if s.cfg != want {
		t.Fatalf("config = %+v; want %+v", s.cfg, want)
	}
	if d := New(c).cfg; d != (config{prefix: DefaultPrefix, opTimeout: DefaultOpTimeout, settleReplicasFor: defaultSettleReplicasFor,
		scopeMaxEntries: DefaultScopeMaxEntries, scopeMaxBytes: DefaultScopeMaxBytes}) {
		t.Fatalf("default config = %+v", d)
	}
}

// TestNewPanics: what New alone can judge, the client and the options
// together.
func TestNewPanics(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	requirePanic(t, "redisstore: New(nil): want a Redis client", func() { New(nil) })
	requirePanic(t, "redisstore: New(nil Option): want an Option", func() { New(c, WithPrefix("p:"), nil) })
	requirePanic(t, "redisstore: New(*redis.Ring): want a *redis.Client or *redis.ClusterClient for WithMinReplicas",
		func() { New(ring, WithMinReplicas(1, time.Second)) })
	New(ring) // without WithMinReplicas any client does
}
