// Package memstore is an in-memory server.Store for one process: tests, demos and
// single-instance services that accept losing their idempotency records on restart.
//
//	store := memstore.New(memstore.WithMaxEntries(50_000))
//	mux.Handle("POST /payments", server.Middleware(store)(create))
//
// # Semantics
//
// Records live in 32 shards selected by a hash of (scope, key); every operation
// locks one shard. Every state change after the claim (record, release) is a
// compare-and-set on (scope, key, owner token).
//
// The handler runs in the same process as the store, so a claim cannot be lost
// to another process's crash. While run executes, its claim stays held even past
// Request.LockTTL: the renewal is implicit. LockTTL still sets the Retry-After of
// a duplicate that arrives meanwhile (claimed_at + LockTTL - now, at least one
// second). A handler that never returns therefore blocks its key for good; bound
// handlers with the http.Server's timeouts.
//
// A 5xx releases the claim, as the middleware asks, and the store holds no
// business write to undo: a handler whose effect happened before its 5xx
// (a payment provider's charge, a write elsewhere) declares it with
// server.DeclareEffect, and the 5xx is then recorded like any answer.
//
// If run panics, the claim is released and the panic continues. A claim is
// never lost while its handler runs, so recording cannot fail after the
// handler's effect: this store never returns ErrNotRecorded in practice, and
// never reports OutcomeUnknown.
//
// # Waiting
//
// A duplicate with Request.Wait > 0 waits on a channel of the claim, made by
// the first waiter and closed when the claim is recorded or released: it then
// replays the record, or claims the key and runs the handler itself. It holds
// no lock while it waits, and stops, answering in progress, when Wait is over
// or its context is done. It waits only when server.WaitTurn gives it a turn
// (the process's bound on waiting duplicates, server.LimitWaiting), and
// answers in progress at once otherwise. A claim nobody waits for costs no
// channel.
//
// The claim itself never waits, so the request's deadline
// (server.LimitRequestTime) bounds this store's part of a request by itself:
// a request whose context is already done when Do is called is refused with
// its context's error (the middleware answers 503), and a waiting duplicate
// stops at the deadline. Recording and releasing take no time that a stall
// could stretch.
//
// # Crash window
//
// The business write and the record cannot share a transaction here. If the
// process dies after the handler's write and before the response is recorded,
// the key is gone with the process and a retry runs the handler again (see
// CONTRACT §4.1). Use a transactional store (pgstore) when that matters.
//
// # Memory bound and fairness
//
// WithMaxEntries (100,000) and WithMaxBytes (256 MiB) bound records and claims
// together: each entry is charged its key, scope, fingerprint, recorded
// response and a fixed overhead. Each non-empty scope has a share,
// WithScopeShare (one eighth) of each bound: past its share a scope may still
// use free room, but never the last share of the store, which stays for the
// scopes within theirs, first come, first served. So a single tenant can fill
// seven eighths of the store, and a tenant that floods unique keys is refused
// (ErrScopeFull) at that line while the others keep succeeding; two tenants
// flooding at once can between them take that last share too. The shares are
// fair only between scopes a caller cannot make up: one that names a new scope
// with every request is within its share every time. The empty scope (no
// server.WithScope) has no quota. The
// middleware records neither its own refusals nor the handler's (400, 401,
// 403, 413, 422, 429, ...), so invalid requests take no room at all.
//
// Expired records are swept lazily: a few on every insert, and as many as
// needed (bounded per call) when a bound is reached. If it is still reached,
// Do refuses with an error wrapping ErrFull or ErrScopeFull before run is
// called; the middleware answers 503 and the client retries later. A live
// record is never evicted to make room: evicting it would let a retry run the
// operation twice, which is the one thing this store exists to prevent.
//
// # Options
//
// An impossible option panics when it is created, and New panics on a nil
// Option, with a message "memstore: <Func>(<value>): want <what is allowed>"
// (WithMaxBytes(-1) panics "memstore: WithMaxBytes(-1): want n >= 1"): the
// rule of every idem package, see package server.
package memstore
