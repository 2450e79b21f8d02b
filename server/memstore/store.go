package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/server"
)

// Sweep bounds: how many expired records one call of Do may remove.
const (
	// insertSweep expired records are removed on every insert, so that memory
	// follows the live set even when the store never fills.
	insertSweep = 4
	// fullSweep expired records at most are removed when the store is full.
	fullSweep = 256
)

// Store is an in-memory, sharded server.Store. It is safe for concurrent use.
// Build it with New; the zero value is not usable.
type Store struct {
	now        func() time.Time // nil: the system clock, read through time.Since
	epoch      time.Time        // the origin of clock
	maxEntries int64
	maxBytes   int64
	// scopeMaxEntries and scopeMaxBytes are each non-empty scope's quota.
	scopeMaxEntries int64
	scopeMaxBytes   int64
	seed            maphash.Seed
	shards          [numShards]shard
	scopes          [numShards]scopeShard

	entries   atomic.Int64 // claims and records held
	bytes     atomic.Int64 // what they cost (see claimCost, grow)
	evictions atomic.Uint64
	refusals  atomic.Uint64
}

var _ server.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts ...Option) *Store {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			badArg("New(nil Option)", "an Option")
		}
		o(&cfg)
	}
	s := &Store{now: cfg.now, maxEntries: int64(cfg.maxEntries), maxBytes: cfg.maxBytes, seed: maphash.MakeSeed(),
		scopeMaxEntries: max(1, int64(float64(cfg.maxEntries)*cfg.scopeShare)),
		scopeMaxBytes:   max(1, int64(float64(cfg.maxBytes)*cfg.scopeShare))}
	if s.now == nil {
		s.epoch = time.Now()
	} else {
		s.epoch = s.now()
	}
	for i := range s.shards {
		s.shards[i].m = make(map[recordKey]*entry)
		s.scopes[i].m = make(map[string]*usage)
	}
	return s
}

// beginState is what begin decided.
type beginState int

const (
	answered  beginState = iota // res is final: replayed, mismatch or in progress
	claimed                     // this caller owns a new claim and must run
	waiting                     // another owner holds the claim: wait for its done channel
	full                        // no room, even after sweeping this shard
	overQuota                   // the request's scope holds its quota, even after sweeping this shard
)

// Do implements server.Store; see the package documentation for this store's
// choices (implicit renewal, waiting, ErrFull, the crash window).
func (s *Store) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	if run == nil {
		return server.Result{}, fmt.Errorf("memstore: nil run: %w", ErrInvalidRequest)
	}
	if req.TTL <= 0 {
		return server.Result{}, fmt.Errorf("memstore: TTL %v is not positive: %w", req.TTL, ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil { // the request's time ran out before the store was asked
		return server.Result{}, fmt.Errorf("memstore: %w", context.Cause(ctx))
	}
	k := recordKey{scope: req.Scope, key: req.Key}
	sh := s.shardFor(k)
	var waitOver <-chan time.Time // set at the first wait: the end of req.Wait
	var waitStart time.Time       // the first wait's start
	var waited time.Duration      // Result.Waited: how long the waits lasted
	mayWait := req.Wait > 0
	for swept := false; ; {
		res, e, done, st := s.begin(sh, k, req, mayWait)
		switch st {
		case answered:
			if e != nil { // a replay: the record is immutable, copied outside the lock
				res.Response = e.stored.response()
			}
			res.Waited = waited
			return res, nil
		case claimed:
			// Only a claim's owner writes e.owner, and only after run: this
			// goroutine may read the token it was given without the lock.
			res, err := s.execute(ctx, sh, e, req.TTL, e.owner, run)
			res.Waited = waited
			return res, err
		case waiting:
			if waitOver == nil {
				done, ok := server.WaitTurn(ctx)
				if !ok { // as many duplicates wait as the process allows: answer now
					return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: s.lease(sh, e), Waited: waited}, nil
				}
				defer done()
				t := time.NewTimer(req.Wait)
				defer t.Stop()
				waitOver, waitStart = t.C, time.Now()
			}
			select {
			case <-done: // recorded or released: look again
			case <-waitOver:
				mayWait = false // one last look, then answer
			case <-ctx.Done():
				return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: s.lease(sh, e),
					Waited: time.Since(waitStart)}, nil
			}
			waited = time.Since(waitStart)
			continue
		}
		if swept {
			s.refusals.Add(1)
			if st == overQuota {
				return server.Result{}, fmt.Errorf("memstore: the scope holds its quota (%d entries or %d bytes), none expired: %w",
					s.scopeMaxEntries, s.scopeMaxBytes, ErrScopeFull)
			}
			return server.Result{}, fmt.Errorf("memstore: the store holds its bound (%d entries or %d bytes), none expired: %w",
				s.maxEntries, s.maxBytes, ErrFull)
		}
		s.sweepAll()
		swept = true
	}
}

// begin answers from an existing live entry, or claims (scope, key) under a
// new owner token of the shard. It returns the entry of a replay (whose record
// the caller copies outside the lock), the new claim, or, when mayWait and
// another owner holds the claim, that claim and the channel closed when it is
// recorded or released; nil otherwise.
func (s *Store) begin(sh *shard, k recordKey, req server.Request, mayWait bool) (server.Result, *entry, <-chan struct{}, beginState) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock()
	if e := sh.m[k]; e != nil {
		if e.owner != 0 || now < e.deadline {
			if e.fingerprint != req.Fingerprint {
				return server.Result{Outcome: server.OutcomeMismatch}, nil, nil, answered
			}
			if e.owner != 0 && mayWait {
				if e.done == nil { // the first waiter makes the channel
					e.done = make(chan struct{})
				}
				return server.Result{}, e, e.done, waiting
			}
			if e.owner != 0 {
				return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: retryAfter(e, now)}, nil, nil, answered
			}
			return server.Result{Outcome: server.OutcomeReplayed}, e, nil, answered
		}
		sh.remove(e) // expired: the key is a new operation
		s.forget(e, true)
	}
	sh.sweep(now, insertSweep, s.evict)
	cost := claimCost(k, req.Fingerprint)
	q := s.reserve(k.scope, cost)
	if q != reserved {
		sh.sweep(now, fullSweep, s.evict)
		if q = s.reserve(k.scope, cost); q == storeFull {
			return server.Result{}, nil, nil, full
		} else if q == scopeFull {
			return server.Result{}, nil, nil, overQuota
		}
	}
	sh.tokens++ // never 0, which marks a record
	e := &entry{key: k, fingerprint: req.Fingerprint, owner: sh.tokens, deadline: after(now, req.LockTTL), index: -1,
		cost: cost}
	sh.m[k] = e
	return server.Result{}, e, nil, claimed
}

// lease returns the Retry-After of claim e: its remaining lease.
func (s *Store) lease(sh *shard, e *entry) time.Duration {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return retryAfter(e, s.clock())
}

// execute runs the handler under token's claim e, then records or releases it.
func (s *Store) execute(ctx context.Context, sh *shard, e *entry, ttl time.Duration, token uint64, run server.RunFunc) (server.Result, error) {
	returned := false
	defer func() {
		if !returned { // run panicked: release, and let the panic continue
			s.finish(sh, e, token, nil, 0)
		}
	}()
	resp, keep := run(ctx)
	returned = true
	if !keep || resp == nil {
		s.finish(sh, e, token, nil, 0)
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	}
	if !s.finish(sh, e, token, resp, ttl) {
		return server.Result{}, fmt.Errorf("memstore: claim lost before the response was recorded: %w", server.ErrNotRecorded)
	}
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
}

// finish is the compare-and-set on (scope, key, token) for the claim e that
// token made: with resp nil it releases the claim, otherwise it turns the
// claim into a record of a copy of resp that expires after ttl. It reports
// false, changing nothing visible, when token no longer owns the key.
//
// The copy is made into e before the lock is taken: a claim's entry is never
// handed to another owner (a new claim is a new entry), so only token's holder
// writes e.stored, and nobody reads it before e.resp is set under the lock.
// For the same reason the owner check is the whole compare-and-set: a claim
// stays in the map, under its key, until its owner records or releases it.
func (s *Store) finish(sh *shard, e *entry, token uint64, resp *server.Response, ttl time.Duration) bool {
	if resp != nil {
		e.stored.set(resp)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e.owner != token {
		return false
	}
	if e.done != nil { // wake the waiters: they replay, or claim the key
		close(e.done)
	}
	if resp == nil {
		delete(sh.m, e.key)
		s.forget(e, false)
		return true
	}
	recorded := int64(len(e.stored.data))
	e.cost += recorded
	s.grow(e.key.scope, recorded)
	e.owner = 0
	e.resp = &e.stored
	e.deadline = after(s.clock(), ttl)
	sh.addRecord(e)
	return true
}

// sweepAll removes up to fullSweep expired records across every shard, one
// shard lock at a time.
func (s *Store) sweepAll() {
	now := s.clock()
	removed := 0
	for i := range s.shards {
		if removed >= fullSweep {
			return
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		n := sh.sweep(now, fullSweep-removed, s.evict)
		sh.mu.Unlock()
		removed += n
	}
}

// evict accounts for an expired record that a sweep removed.
func (s *Store) evict(e *entry) { s.forget(e, true) }

// shardFor picks k's shard from a seeded hash of its key and scope.
func (s *Store) shardFor(k recordKey) *shard {
	h := maphash.String(s.seed, k.key)
	if k.scope != "" {
		h ^= bits.RotateLeft64(maphash.String(s.seed, k.scope), 31) * 0x9e3779b97f4a7c15
	}
	return &s.shards[(h^h>>32)%numShards]
}

// clock reads the store's clock as nanoseconds since the store was built, so
// that deadlines compare as integers. The system clock is read as
// time.Since(epoch): its monotonic reading alone, which costs half of
// time.Now.
func (s *Store) clock() int64 {
	if s.now == nil {
		return int64(time.Since(s.epoch))
	}
	return int64(s.now().Sub(s.epoch))
}

// after returns the deadline d after t, saturating instead of wrapping.
func after(t int64, d time.Duration) int64 {
	if sum := t + int64(d); (d > 0) == (sum > t) {
		return sum
	}
	if d > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

// retryAfter is the claim's remaining lease, at least one second: the claim
// itself stays held past it while its handler runs.
func retryAfter(e *entry, now int64) time.Duration {
	if e.deadline <= now {
		return time.Second
	}
	d := time.Duration(e.deadline - now)
	if d < 0 { // wrapped: the lease ends beyond what a Duration holds
		return math.MaxInt64
	}
	return max(d, time.Second)
}
