// Package redisstore is a server.Store that keeps idempotency records in Redis
// (standalone, Sentinel or Cluster). It is its own Go module, so users of the
// idem client never download go-redis.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
//	store := redisstore.New(rdb, redisstore.WithPrefix("idem:"))
//	if err := store.Check(ctx); err != nil { // refuses a Redis that can evict records
//		log.Fatal(err)
//	}
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
//
// The store needs Redis 6.0 or later (its scripts use SET KEEPTTL and TIME);
// it is tested with 7.0.
//
// # Keys and values
//
// Each (scope, key) is one Redis key, prefix + hex(SHA-256(scope)) + ":" + key,
// so no scope can name another scope's records, and every script touches a
// single key (one Cluster slot; no cross-slot scripts). The value is either a
// claim (in progress: a random 16-byte owner token, the lease's deadline, a
// "suspect" time, and the request's fingerprint) or a finished record
// (fingerprint, status, headers with repeated values, body). Both are binary
// and start with a version byte; a value that does not decode is a store error
// (ErrCorruptRecord, ErrUnknownVersion), never a replay.
//
// # Claims and leases
//
// A claim's lease is inside its value: a deadline in Redis's own clock (TIME),
// LockTTL after the claim or its last renewal. The key itself lives as long as
// a record would (the request's TTL, and at least LockTTL plus the grace
// below), so a Redis outage, however long, cannot make a claim vanish by
// expiry (Redis expires keys in real time, across restarts too).
//
// A claim whose deadline has passed is not free at once. Its owner may be
// dead, or alive and only cut off from Redis (an outage, a restart, a long
// pause), about to renew it or to record its response. The first request to
// find it expired marks it suspect (stamps the time) and gets
// OutcomeInProgress; the key can be taken only by a request that comes (or,
// waiting, looks again) after a whole grace period has passed since the mark,
// with Redis up, without the owner renewing (which clears the mark) or
// finishing. The grace is a third of LockTTL, at least 1 s: far longer than a
// live owner needs to get back in once Redis answers. So a crashed owner's key
// is free again LockTTL plus the grace after its last renewal (40 s with the
// default 30 s LockTTL), once someone asks; a live owner never loses its key to
// an outage of Redis.
//
// Claims written by earlier releases of this package (kind 'c', whose lease is
// the key's PTTL) are still read as in-progress claims and expire as before.
//
// # Scripts
//
// Four Lua scripts. The owner's three are compare-and-sets on the claim's
// first 18 bytes (version, kind, the owner's random token):
//
//   - claim: if the key is free, SET it to a new claim (deadline now+LockTTL)
//     PX the key's TTL; if it holds a claim past its deadline, mark it suspect
//     or, after the grace, take it over (as above); otherwise return what holds
//     it: a finished record with the same fingerprint is replayed, one with
//     another fingerprint is a mismatch; another owner's claim is
//     OutcomeInProgress with RetryAfter = the rest of its lease (or of its
//     grace), or a mismatch if its fingerprint differs.
//   - finish: if the key holds my claim, or nothing, SET key record PX TTL.
//     "Nothing" means my claim was lost (a Redis restart without persistence,
//     a failover) and nobody claimed the key since: my run is the only one,
//     and recording it is what a retry needs.
//   - renew: if the key holds my claim, move its deadline to now+LockTTL, clear
//     the suspect mark and set the key's TTL again.
//   - release: if the key holds my claim, DEL it (a key already gone counts as
//     released).
//
// A holder that lost its claim to another owner therefore can neither
// overwrite nor delete that owner's claim or record: its finish or release
// finds another value, and Do returns an error wrapping server.ErrNotRecorded
// and ErrLeaseLost. A release that fails because Redis is unreachable is not
// reported: the claim's lease then ends by itself, and after the grace a retry
// runs again, which is what release asks for.
//
// A claim call that fails (timed out, connection cut) may have run in Redis
// all the same, only its answer lost. Do returns the error before the handler
// runs (the middleware answers 503, "retry with the same key") and releases
// the claim at once, and, if Redis could not be reached for that, again in the
// background with backoff up to 1 s until the claim's lease and grace are
// over, so the retry finds the key free instead of waiting out the lease
// (TestLostClaimReplyDoesNotBlockTheRetry).
//
// # Time bounds
//
// Every Redis call (claim, renew, finish, release, WAIT, Check) is bounded by
// WithOpTimeout (WAIT by its own timeout on top). go-redis honours a call's
// deadline on the socket only with ContextTimeoutEnabled; without it the store
// still answers at the deadline, but the call goes on in a goroutine of its
// own, holding a pooled connection, until the client's ReadTimeout. Set
// ContextTimeoutEnabled (idem-server does) so the connection is freed at the
// deadline too.
//
// # Round trips
//
// A replay, a mismatch and an in-progress answer cost one round trip (claim). A
// first execution costs two (claim and finish, or claim and release when the
// response is not kept) plus one renewal per renew interval the handler runs
// past. WithMinReplicas adds one WAIT after the claim and one after the finish.
// The first Do of a Store adds one CONFIG GET per master (see Check). Scripts
// are sent with EVALSHA; the first use of a script on a Redis server (and after
// a restart or SCRIPT FLUSH) costs one extra round trip to load it.
//
// # Waiting for an in-progress duplicate
//
// When another owner holds the claim and Request.Wait is positive, Do polls:
// it runs the claim script again after 5 ms, then at doubling intervals capped
// at 50 ms, until the owner's record appears (replayed), the owner releases the
// key (Do claims it and runs the handler itself, as if it had come first),
// Request.Wait has passed (OutcomeInProgress with the remaining lease), or ctx
// is done. The waiter holds nothing the owner needs: each look is one script
// on one key, and no connection stays with the waiter between looks. Measured
// on loopback (TestWaitReplaysWhenTheOwnerFinishes), a waiter answers at most
// one poll interval (50 ms) after the owner finished, for about 20 round trips a
// second per waiting duplicate. Pub/sub or keyspace notifications would answer
// in about a round trip, but need a subscription per waiter (or a shared one
// per process, and sharded channels on a Cluster) and a configuration change
// (notify-keyspace-events) on managed Redis; duplicates that wait are rare, so
// the poll's cost is small and it works on every topology unchanged.
//
// # Renewals
//
// While the handler runs, a goroutine renews the claim every renew interval (a
// third of the request's LockTTL by default, see WithRenewInterval), so a slow
// handler keeps its claim and duplicates get OutcomeInProgress. A renewal that
// fails (Redis stalled, restarting, unreachable) is retried every quarter
// interval for as long as the handler runs, so the owner's renewal lands as
// soon as Redis answers again, which clears any suspect mark well within the
// grace: a Redis stall of any length that the owner survives never hands its
// key to a duplicate (TestRedisStallLongerThanTheLeaseRunsOnce stops a
// redis-server for twice the lease under a handler past its write: one run).
// When no renewal has landed by the lease's local end (LockTTL after the last
// renewal sent), the handler's context is cancelled with a cause wrapping
// ErrLeaseLost, a whole grace before anyone could take the key (a handler that
// stops before its business write leaves nothing at stake), and the renewals
// go on. When a renewal finds the claim taken by another owner, the context is
// cancelled the same way and the renewals stop. Finish and release use a
// context detached from the request, bounded by WithOpTimeout, so a client
// that disconnects still finishes or releases. A handler that panics has its
// claim released and the panic goes on. A 5xx releases the claim too, as the
// middleware asks, and Redis holds no business write to undo: a handler whose
// effect happened before its 5xx declares it with server.DeclareEffect, and the
// 5xx is then recorded like any answer.
//
// What remains: a takeover while the handler still runs needs the owner to
// have been silent, with Redis up for the others, for the rest of its lease
// plus the grace: its process paused (a stop-the-world pause, SIGSTOP of the
// process, a frozen VM) or cut off from Redis while other instances reach it,
// for LockTTL plus the grace after the last renewal that reached Redis (40 s
// with the default 30 s LockTTL), and a handler that ignores its cancelled
// context through all of it. Only such a handler can then run twice.
//
// # Redis fails after the handler's effect
//
// When the handler has returned a response to keep and the finish fails
// because Redis cannot be reached (killed, restarting, partitioned, timing
// out), the effect has happened but is not recorded. The store never releases
// that claim: Do returns an error wrapping server.ErrNotRecorded (the
// middleware answers "outcome unknown", not "retry"), and a goroutine keeps
// retrying the finish in the background, with backoff from 20 ms capped at
// 250 ms, until it succeeds, finds another owner's value (it gives up: that
// owner's record counts), or the record's TTL has passed (with WithMinReplicas,
// once the record is written and only WAIT fails, for one minute more at most:
// see Replication and failover). Meanwhile a retry of
// the key finds the claim and waits (or gets OutcomeInProgress): the claim
// outlives the outage (its key lives for the TTL), and even once its lease has
// ended the retry cannot take it before a grace period with Redis up, which
// the owner's background finish, retrying every 250 ms at most, does not let
// pass. The finish writes the handler's real response and the retry replays
// it; the handler is not run again. The store logs (WithLogger) when a
// response is recorded late and when it gives up.
//
// What this needs: Redis must come back with its data (appendonly yes; with
// appendfsync always no acknowledged write is lost), since a Redis that
// restarts empty has lost the claim and every record; and the owning process
// must live until Redis is back (if it dies too, that is the crash window
// below). The store never writes an "outcome unknown" marker and Do never
// returns server.OutcomeUnknown: it still holds the response it could not
// record, and records it, which tells a retry more than a marker would.
//
// # Eviction
//
// An evicted record makes its key a new operation: a retry runs the handler
// again. Every record carries a TTL, so the volatile-* policies (volatile-lru,
// volatile-lfu, volatile-random, volatile-ttl) take records as surely as the
// allkeys-* ones. The only safe maxmemory-policy is noeviction (Redis's
// default), with which a full Redis refuses new claims (the middleware answers
// 503) and keeps every record. Check, which Do also runs on its first use,
// returns ErrEvictionPolicy for any other policy on any master, unless the
// store was built WithEvictionAllowed. A Redis that refuses CONFIG GET (managed
// services often rename it) cannot be checked: the store logs a warning and
// runs. Check looks at masters only; replicas, which become masters on
// failover, must be configured alike.
//
// # Replication and failover
//
// Redis replication is asynchronous: a master answers a write before any
// replica has it, and a failover (Sentinel or Cluster) promotes a replica that
// may lack the master's last writes; they are then lost. For this store a lost
// claim lets a second request run the handler while the first still runs, and
// a lost record lets a retry run it again. With Sentinel, 8 workers and one
// SENTINEL FAILOVER on loopback, TestSentinelFailover counts thousands of both
// (the README reports a run).
//
// WithMinReplicas(n, timeout) narrows this: after the claim, Do sends WAIT n
// timeout on the same connection and runs the handler only when n replicas
// have acknowledged the claim; otherwise it releases the claim and fails
// (ErrNotReplicated; the middleware answers 503 and nothing ran). After the
// handler, the record is WAITed for too. When the record is not acknowledged
// in time, the handler's response is still returned (a 503 would make the
// client retry, and the effect has happened), a warning is logged, and the
// record is rewritten and WAITed for in the background, with backoff up to
// 5 s, until acknowledged or for one minute (then a warning says it is on the
// master only; a retry replays it from there). With WithMinReplicas(1, 1s) TestSentinelFailover counts 0
// duplicates and 0 lost records over the same failover.
//
// What WAIT does not promise: it is not consensus. It says the replicas
// received the write, not that Sentinel will promote one of them (with several
// replicas, ask for all of them, or accept that a less up-to-date one may be
// chosen), not that they wrote it to disk, and a write WAIT timed out on is
// still on the master and may survive or not. It cannot stop a master cut off
// from its replicas from accepting writes: min-replicas-to-write (a Redis
// setting) makes such a master refuse writes, which the store then reports as
// errors (503 before the handler runs). Renewals are not WAITed for. On a
// Cluster, WAIT runs on the master that owns the key (a 3-master Cluster
// without replicas can never acknowledge: every claim then fails).
//
// On a Cluster the same holds for a failover that does not wait for the
// replica (a killed master, CLUSTER FAILOVER FORCE or TAKEOVER):
// TestClusterForcedFailover streams operations across a CLUSTER FAILOVER FORCE
// on a private 3+3 Cluster and counts, without WithMinReplicas, records lost
// (each a second run of its handler on the re-send), and with
// WithMinReplicas(1, 1s) none. Whatever the failover, every store call that
// fails on a Cluster client (a refused or timed-out connection, MOVED,
// CLUSTERDOWN) asks go-redis to reload its slot map, so the failed master's
// slots reach the promoted replica within about a second of the promotion
// (TestClusterFailoverNewKeysSucceedWithinSeconds), not at go-redis's periodic
// refresh, a minute later.
//
// # The crash window
//
// Redis cannot share the business write's transaction. If the process dies
// after the handler's business write (to a database elsewhere) and before
// finish, the work is done but nothing is recorded and no background finish is
// left to record it: the claim's lease ends, and after the grace a retry of the
// same key runs the handler again. This is the one exception to "at most once" that
// the contract (CONTRACT.md §4) allows for stores that cannot share the
// business transaction. Keep the business write idempotent on its own (a
// unique constraint on the idempotency key) or use the PostgreSQL store when
// that window matters.
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
