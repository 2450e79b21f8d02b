package memstore

import (
	"hash/maphash"
	"sync"
)

// entryOverhead is what one entry costs beyond its key, scope, fingerprint
// and recorded response, in bytes: the entry itself, its map slot and its
// heap slot, rounded up.
const entryOverhead = 256

// claimCost is what a new claim of k with fingerprint fp is charged.
func claimCost(k recordKey, fp string) int64 {
	return entryOverhead + int64(len(k.scope)+len(k.key)+len(fp))
}

// usage is what one scope holds.
type usage struct {
	entries int64
	bytes   int64
}

// scopeShard is one locked part of the per-scope usage table. A scope is in
// the table while it holds at least one entry, so the table never outgrows
// the entries.
type scopeShard struct {
	mu sync.Mutex
	m  map[string]*usage
	_  [64]byte
}

// quotaResult says why a reservation failed.
type quotaResult int

const (
	reserved quotaResult = iota
	storeFull
	scopeFull
)

// reserve takes one entry and cost bytes for scope from the store's bounds
// and from the scope's quota (the empty scope has none). A scope within its
// share may use any free room. Past its share it may still use free room, but
// never the last share of the store, which is kept for the scopes within
// theirs: a single tenant can fill most of the store, and a flooding tenant
// cannot lock the others out. Bytes are checked as "below the bound": a record
// may take a scope or the store past it by one response, and then no new claim
// fits until something expires.
func (s *Store) reserve(scope string, cost int64) quotaResult {
	var n int64
	for {
		n = s.entries.Load()
		if n >= s.maxEntries || s.bytes.Load() >= s.maxBytes {
			return storeFull
		}
		if s.entries.CompareAndSwap(n, n+1) {
			break
		}
	}
	s.bytes.Add(cost)
	if scope == "" {
		return reserved
	}
	ss := s.scopeShardFor(scope)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	u := ss.m[scope]
	if u == nil {
		u = &usage{}
		ss.m[scope] = u
	}
	overShare := u.entries >= s.scopeMaxEntries || u.bytes >= s.scopeMaxBytes
	inReserve := n >= s.maxEntries-s.scopeMaxEntries || s.bytes.Load()-cost >= s.maxBytes-s.scopeMaxBytes
	if overShare && inReserve {
		if u.entries == 0 {
			delete(ss.m, scope)
		}
		s.entries.Add(-1)
		s.bytes.Add(-cost)
		return scopeFull
	}
	u.entries++
	u.bytes += cost
	return reserved
}

// grow charges scope (and the store) n more bytes: a claim became a record.
func (s *Store) grow(scope string, n int64) {
	s.bytes.Add(n)
	if scope == "" {
		return
	}
	ss := s.scopeShardFor(scope)
	ss.mu.Lock()
	if u := ss.m[scope]; u != nil {
		u.bytes += n
	}
	ss.mu.Unlock()
}

// forget gives back what entry e held; evicted counts an expired record
// removed.
func (s *Store) forget(e *entry, evicted bool) {
	s.entries.Add(-1)
	s.bytes.Add(-e.cost)
	if evicted {
		s.evictions.Add(1)
	}
	if e.key.scope == "" {
		return
	}
	ss := s.scopeShardFor(e.key.scope)
	ss.mu.Lock()
	if u := ss.m[e.key.scope]; u != nil {
		u.entries--
		u.bytes -= e.cost
		if u.entries <= 0 {
			delete(ss.m, e.key.scope)
		}
	}
	ss.mu.Unlock()
}

func (s *Store) scopeShardFor(scope string) *scopeShard {
	return &s.scopes[maphash.String(s.seed, scope)%numShards]
}
