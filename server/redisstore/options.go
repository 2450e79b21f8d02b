package redisstore

import (
	"fmt"
	"log/slog"
	"time"
)

// DefaultPrefix is the prefix of every key the store writes unless WithPrefix
// changes it.
const DefaultPrefix = "idem:"

// DefaultOpTimeout bounds each Redis call unless WithOpTimeout changes it.
const DefaultOpTimeout = 2 * time.Second

// An Option configures a Store. An option with an impossible value panics when
// it is made, with the message the package documentation describes.
type Option func(*config)

type config struct {
	prefix         string
	renewInterval  time.Duration // 0: Request.LockTTL / 3
	opTimeout      time.Duration
	minReplicas    int           // 0: no WAIT
	replicaTimeout time.Duration // WAIT's timeout when minReplicas > 0
	// settleReplicasFor bounds the background WAITs for a record already on
	// the master (defaultSettleReplicasFor; shorter in tests).
	settleReplicasFor time.Duration
	evictionAllowed   bool
	logger            *slog.Logger // nil: no logging
	// scopeMaxEntries and scopeMaxBytes bound each non-empty scope's records.
	scopeMaxEntries int64
	scopeMaxBytes   int64
}

// WithPrefix sets the prefix of every key the store writes (default "idem:").
// It must not be empty, so that the store's keys can be told apart from other
// data in the same database: WithPrefix("") panics.
func WithPrefix(p string) Option {
	if p == "" {
		panic(`redisstore: WithPrefix(""): want a non-empty prefix`)
	}
	return func(c *config) { c.prefix = p }
}

// WithRenewInterval sets how often a claim's lease is renewed while the handler
// runs (default a third of the request's LockTTL). A lease is never renewed less
// often than every half LockTTL, whatever d says, so one late renewal cannot
// let it expire. It panics unless d is positive.
func WithRenewInterval(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("redisstore: WithRenewInterval(%v): want a positive interval", d))
	}
	return func(c *config) { c.renewInterval = d }
}

// WithOpTimeout bounds each Redis call the store makes (claim, renew, finish,
// release); default DefaultOpTimeout. Calls made after the handler returned use
// a context detached from the request, so this is what bounds them. It panics
// unless d is positive.
func WithOpTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("redisstore: WithOpTimeout(%v): want a positive timeout", d))
	}
	return func(c *config) { c.opTimeout = d }
}

// WithMinReplicas makes every claim and every record wait (Redis WAIT) until n
// replicas have acknowledged it, for at most timeout each. A claim that is not
// acknowledged in time is released and Do fails before the handler runs (the
// middleware answers 503; nothing ran). A record that is not acknowledged in
// time is still answered with the handler's response (the effect happened: a
// 503 would invite a second one); a warning is logged and the store keeps
// writing and WAITing for it in the background. docs/stores.md in the
// repository says what this does and does not promise. It panics unless n is at least 1
// and timeout positive; New panics unless the client is a *redis.Client
// (standalone or Sentinel) or a *redis.ClusterClient.
func WithMinReplicas(n int, timeout time.Duration) Option {
	if n < 1 || timeout <= 0 {
		panic(fmt.Sprintf("redisstore: WithMinReplicas(%d, %v): want n >= 1 and a positive timeout", n, timeout))
	}
	return func(c *config) { c.minReplicas, c.replicaTimeout = n, timeout }
}

// WithEvictionAllowed lets the store run on a Redis whose maxmemory-policy can
// evict its keys (every policy but noeviction: records carry a TTL, so the
// volatile-* policies take them too). By default Do and Check refuse such a
// Redis with ErrEvictionPolicy, since an evicted record makes its key a new
// operation and a retry runs the handler again.
func WithEvictionAllowed() Option {
	return func(c *config) { c.evictionAllowed = true }
}

// WithLogger sets where the store logs what it cannot return: a record not
// acknowledged by the replicas, a response recorded late in the background
// after a Redis failure, or given up on, and a Redis that does not let it
// read maxmemory-policy. By default the store logs nothing. WithLogger(nil)
// panics.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("redisstore: WithLogger(nil): want a *slog.Logger")
	}
	return func(c *config) { c.logger = l }
}

// WithScopeLimits bounds what the records of one scope (server.WithScope's
// principal or tenant) may take in Redis: at most entries records and bytes
// bytes, each record charged its key, its value and what Redis takes per key
// (about 160 bytes); by default DefaultScopeMaxEntries (100,000) and
// DefaultScopeMaxBytes (64 MiB). A scope at or past either gets ErrScopeFull
// for its new keys (the middleware answers 503 with Retry-After) until some of
// its records expire; its replays, and every other scope, are served. The
// empty scope (a middleware without WithScope) is not bounded. The bound is
// counted in Redis, so every process sharing the store and prefix shares it,
// and it is approximate in two ways, both toward letting a scope hold a little
// more: records being written when a scope reaches its bound (at most the
// scope's requests in flight, in every process) still land, and a record that
// another owner's claim replaced, or whose charge failed, may be counted once
// too often or not at all. docs/stores.md in the repository says what it costs
// and how Redis's own maxmemory bounds the store as a whole. It panics unless
// both are at least 1.
func WithScopeLimits(entries, bytes int64) Option {
	if entries < 1 || bytes < 1 {
		panic(fmt.Sprintf("redisstore: WithScopeLimits(%d, %d): want both at least 1", entries, bytes))
	}
	return func(c *config) { c.scopeMaxEntries, c.scopeMaxBytes = entries, bytes }
}
