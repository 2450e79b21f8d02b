// Package redisstore is a server.Store that keeps idempotency records in Redis
// (standalone, Sentinel or Cluster). It is its own Go module, so users of the
// idem client never download go-redis.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
//	store := redisstore.New(rdb, redisstore.WithPrefix("idem:"))
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
//
// # Keys and values
//
// Each (scope, key) is one Redis key, prefix + hex(SHA-256(scope)) + ":" + key,
// so no scope can name another scope's records, and every script touches a
// single key (one Cluster slot; no cross-slot scripts). The value is either a
// claim (in progress: a random 16-byte owner token and the request's
// fingerprint) or a finished record (fingerprint, status, headers with repeated
// values, body). Both are binary, length-prefixed and start with a version
// byte; a value that does not decode is a store error (ErrCorruptRecord,
// ErrUnknownVersion), never a replay.
//
// # Scripts
//
// Four Lua scripts, each a compare-and-set on the whole stored value (the claim
// holds the owner's token, so equal value means same owner):
//
//   - claim: SET key claim NX PX LockTTL; if the key exists, return its value and
//     PTTL in the same round trip. A finished record with the same fingerprint is
//     replayed, one with another fingerprint is a mismatch; another owner's claim
//     is OutcomeInProgress with RetryAfter = its PTTL (or a mismatch if its
//     fingerprint differs).
//   - finish: if GET key == my claim, SET key record PX TTL.
//   - renew: if GET key == my claim, PEXPIRE key LockTTL.
//   - release: if GET key == my claim, DEL key (a key already gone counts as
//     released).
//
// A holder that lost its claim therefore can neither overwrite nor delete a
// newer owner's claim or record: its finish or release finds another value, and
// Do returns an error wrapping server.ErrNotRecorded and ErrLeaseLost. A
// release that fails because Redis is unreachable is not reported: the claim
// then expires by itself within LockTTL.
//
// # Round trips
//
// A replay, a mismatch and an in-progress answer cost one round trip (claim). A
// first execution costs two (claim and finish, or claim and release when the
// response is not kept) plus one renewal per renew interval the handler runs
// past. Scripts are sent with EVALSHA; the first use of a script on a Redis
// server (and after a restart or SCRIPT FLUSH) costs one extra round trip to
// load it.
//
// # Leases
//
// While the handler runs, a goroutine renews the claim every renew interval (a
// third of the request's LockTTL by default, see WithRenewInterval), so a slow
// handler keeps its claim and duplicates get OutcomeInProgress. If a renewal
// finds the claim gone or taken, or Redis fails until the lease would have
// expired, the handler's context is cancelled with a cause wrapping
// ErrLeaseLost, nothing is recorded, and Do returns an error wrapping
// server.ErrNotRecorded. Finish and release use a context detached from the
// request, bounded by WithOpTimeout, so a client that disconnects still
// finishes or releases. A handler that panics has its claim released and the
// panic goes on.
//
// # The crash window
//
// Redis cannot share the business write's transaction. If the process dies
// after the handler's business write (to a database elsewhere) and before
// finish, the work is done but nothing is recorded: the claim expires after
// LockTTL and a retry of the same key runs the handler again. This is the one
// exception to "at most once" that the contract (CONTRACT.md §4) allows for
// stores that cannot share the business transaction. Keep the business write
// idempotent on its own (a unique constraint on the idempotency key) or use
// the PostgreSQL store when that window matters. Likewise a Redis failover
// that loses recent writes (asynchronous replication) can lose a claim or a
// record.
package redisstore
