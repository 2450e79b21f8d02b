// Package redisstore is a server.Store that keeps idempotency records in Redis
// (standalone, Sentinel or Cluster). It is its own Go module, so users of the
// idem client never download go-redis.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
//		Addrs:                 []string{"127.0.0.1:6379"},
//		ContextTimeoutEnabled: true, // frees a connection at the call's deadline
//	})
//	store := redisstore.New(rdb, redisstore.WithPrefix("idem:"))
//	if err := store.Check(ctx); err != nil { // refuses a Redis that can evict records
//		log.Fatal(err)
//	}
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
//
// New takes any redis.UniversalClient and does not own it (closing it is the
// caller's job) nor contact Redis. Check verifies the eviction policy; servers
// call it at start, and Do runs it on its first use too. Ping tells a
// readiness check whether every master answers.
//
// # What Redis must provide
//
//   - Redis 6.0 or later (the scripts use SET KEEPTTL and TIME); tested with
//     7.0.
//   - maxmemory-policy noeviction, Redis's default, on every master and
//     replica: an evicted record makes its key a new operation, and every
//     record has a TTL, so the volatile-* policies take records too. Check
//     refuses any other policy (ErrEvictionPolicy) unless WithEvictionAllowed.
//     A Redis that refuses CONFIG GET cannot be checked: the store logs a
//     warning (WithLogger) and runs.
//   - Persistence (appendonly yes; appendfsync always so that no acknowledged
//     write is lost): when Redis fails after a handler's effect, the store
//     keeps the claim and records the response once Redis is back, which only
//     works if Redis comes back with its data.
//   - With Sentinel or replicas, WithMinReplicas if a failover must not lose
//     claims and records: replication is asynchronous. A Cluster without
//     replicas cannot acknowledge, and every claim then fails.
//   - ContextTimeoutEnabled on the go-redis client (idem-server sets it):
//     every call is bounded by WithOpTimeout either way, but without it a
//     timed-out call keeps its pooled connection until the client's
//     ReadTimeout.
//
// The other options set the key prefix (WithPrefix), the lease renewal
// interval (WithRenewInterval) and where the store logs what it cannot return
// (WithLogger).
//
// # How it works
//
// docs/stores.md in the repository says how the store keys, claims, renews
// and records (its keys and values, its five scripts, leases and the grace
// before an expired claim is taken), what each outcome costs in round trips,
// how duplicates wait, what happens when Redis stalls, fails after the
// handler's effect or fails over, and the crash window: a process that dies
// between the business write and the record leaves the work done and
// unrecorded, so a retry runs it again (the one exception docs/CONTRACT.md
// §4 allows for stores that cannot share the business transaction), unless
// the handler called server.BeginEffect before its effect: the store then
// marks the claim (as durably as the claim: WAITed for with WithMinReplicas),
// and a retry after the owner is gone (its lease and the grace over) gets
// OutcomeUnknown for the record's TTL, never a second run. The rules every
// store follows are in docs/CONTRACT.md; the answers the middleware
// gives are in docs/server.md and docs/problems.md.
//
// # Options
//
// An impossible option value is a programming error: the option panics when
// it is made, with a message "redisstore: <Func>(<value>): want <what is
// allowed>" (WithOpTimeout(0) panics "redisstore: WithOpTimeout(0s): want a
// positive timeout"). New panics, in the same form, on a nil client or a nil
// Option, and on what only the client can tell: WithMinReplicas with a client
// that cannot WAIT. Nothing is checked per
// request. It is the rule of every idem package.
package redisstore
