package memstore

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
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
	now        func() time.Time
	maxEntries int64
	seed       maphash.Seed
	shards     [numShards]shard

	entries   atomic.Int64 // claims and records held
	evictions atomic.Uint64
	refusals  atomic.Uint64
	tokens    atomic.Uint64
}

var _ server.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts ...Option) *Store {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	s := &Store{now: cfg.now, maxEntries: int64(cfg.maxEntries), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[recordKey]*entry)
	}
	return s
}

// beginState is what begin decided.
type beginState int

const (
	answered beginState = iota // res is final: replayed, mismatch or in progress
	claimed                    // this caller owns a new claim and must run
	full                       // no room, even after sweeping this shard
)

// Do implements server.Store; see the package documentation for this store's
// choices (implicit renewal, ErrFull, the crash window).
func (s *Store) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	if run == nil {
		return server.Result{}, fmt.Errorf("memstore: nil run: %w", ErrInvalidRequest)
	}
	if req.TTL <= 0 {
		return server.Result{}, fmt.Errorf("memstore: TTL %v is not positive: %w", req.TTL, ErrInvalidRequest)
	}
	k := recordKey{scope: req.Scope, key: req.Key}
	sh := s.shardFor(k)
	token := s.tokens.Add(1)
	for swept := false; ; swept = true {
		res, st := s.begin(sh, k, req, token)
		switch st {
		case answered:
			if res.Response != nil { // a stored record: immutable, copied outside the lock
				res.Response = cloneResponse(res.Response)
			}
			return res, nil
		case claimed:
			return s.execute(ctx, sh, k, req.TTL, token, run)
		}
		if swept {
			s.refusals.Add(1)
			return server.Result{}, fmt.Errorf("memstore: %d live records and claims, none expired: %w", s.maxEntries, ErrFull)
		}
		s.sweepAll()
	}
}

// begin answers from an existing live entry, or claims (scope, key) for token.
// A replay's Response is the stored record itself, which the caller must copy.
func (s *Store) begin(sh *shard, k recordKey, req server.Request, token uint64) (server.Result, beginState) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	if e := sh.m[k]; e != nil {
		if e.owner != 0 || now.Before(e.expires) {
			if e.fingerprint != req.Fingerprint {
				return server.Result{Outcome: server.OutcomeMismatch}, answered
			}
			if e.owner != 0 {
				return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: retryAfter(e, now)}, answered
			}
			return server.Result{Outcome: server.OutcomeReplayed, Response: e.resp}, answered
		}
		sh.remove(e) // expired: the key is a new operation
		s.freed(1)
	}
	s.freed(sh.sweep(now, insertSweep))
	if !s.reserve() {
		s.freed(sh.sweep(now, fullSweep))
		if !s.reserve() {
			return server.Result{}, full
		}
	}
	sh.m[k] = &entry{key: k, fingerprint: req.Fingerprint, owner: token, claimedAt: now, lockTTL: req.LockTTL, index: -1}
	return server.Result{}, claimed
}

// execute runs the handler under token's claim, then records or releases it.
func (s *Store) execute(ctx context.Context, sh *shard, k recordKey, ttl time.Duration, token uint64, run server.RunFunc) (server.Result, error) {
	returned := false
	defer func() {
		if !returned { // run panicked: release, and let the panic continue
			s.finish(sh, k, token, nil, 0)
		}
	}()
	resp, keep := run(ctx)
	returned = true
	if !keep || resp == nil {
		s.finish(sh, k, token, nil, 0)
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	}
	if !s.finish(sh, k, token, resp, ttl) {
		return server.Result{}, fmt.Errorf("memstore: claim lost before the response was recorded: %w", server.ErrNotRecorded)
	}
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
}

// finish is the compare-and-set on (scope, key, token): with resp nil it
// releases the claim, otherwise it turns the claim into a record of a copy of
// resp that expires after ttl. It reports false, changing nothing, when token
// does not own the key.
func (s *Store) finish(sh *shard, k recordKey, token uint64, resp *server.Response, ttl time.Duration) bool {
	var stored *server.Response
	if resp != nil {
		stored = cloneResponse(resp) // outside the lock
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil || e.owner != token {
		return false
	}
	if stored == nil {
		delete(sh.m, k)
		s.entries.Add(-1)
		return true
	}
	e.owner = 0
	e.resp = stored
	e.expires = s.now().Add(ttl)
	sh.addRecord(e)
	return true
}

// sweepAll removes up to fullSweep expired records across every shard, one
// shard lock at a time.
func (s *Store) sweepAll() {
	now := s.now()
	removed := 0
	for i := range s.shards {
		if removed >= fullSweep {
			return
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		n := sh.sweep(now, fullSweep-removed)
		sh.mu.Unlock()
		s.freed(n)
		removed += n
	}
}

// reserve takes one slot of the capacity, or reports false if none is left.
func (s *Store) reserve() bool {
	for {
		n := s.entries.Load()
		if n >= s.maxEntries {
			return false
		}
		if s.entries.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// freed accounts for n expired records removed.
func (s *Store) freed(n int) {
	if n > 0 {
		s.entries.Add(int64(-n))
		s.evictions.Add(uint64(n))
	}
}

func (s *Store) shardFor(k recordKey) *shard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(k.scope)
	h.WriteByte(0)
	h.WriteString(k.key)
	return &s.shards[h.Sum64()%numShards]
}

// retryAfter is the claim's remaining lease, at least one second: the claim
// itself stays held past it while its handler runs.
func retryAfter(e *entry, now time.Time) time.Duration {
	if d := e.claimedAt.Add(e.lockTTL).Sub(now); d > time.Second {
		return d
	}
	return time.Second
}

// cloneResponse copies r so that neither side aliases the other's header or body.
func cloneResponse(r *server.Response) *server.Response {
	return &server.Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}
