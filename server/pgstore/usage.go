package pgstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/scopecache"
	"github.com/idemkit/idem/server"
)

// Defaults of WithScopeLimits: what one scope's records may take in the table.
const (
	DefaultScopeMaxEntries = 100_000
	DefaultScopeMaxBytes   = 64 << 20
)

// ErrScopeFull is wrapped by Do's error, before the handler runs, when a
// request with a new key comes from a scope that holds its share of the table
// (WithScopeLimits): the claim is rolled back and the middleware answers 503
// with Retry-After. The scope's new keys are refused until some of its
// records expire; its replays, and its duplicates of keys in progress, are
// served, and so is every other scope.
var ErrScopeFull = errors.New("pgstore: the scope holds its share of the store")

// How often a process counts a scope's live records in the table (the count
// statement, pipelined with a claim of the scope): every usageRecount while the
// scope is within half its share, every usageRefresh past it. Between counts
// the process adds the records it writes itself; the other processes' records
// it learns at the next count.
const (
	usageRecount = 10 * time.Second
	usageRefresh = time.Second
)

// rowOverhead is what a record takes in the table beyond its values' bytes,
// as pg_column_size of the row counts it (the tuple's header, the varlena
// headers, the fixed-size columns), for the local charge of a record written
// between counts.
const rowOverhead = 100

// scopeUsage is a scope's live records in the table as this process knows
// them: the last count, when it was made, and the records written since.
type scopeUsage struct {
	entries, bytes int64
	at             time.Time
}

// usageCache holds the usage of the scopes this process served; a scope it
// dropped to make room (scopecache.MaxScopes) is counted again at its next
// claim.
type usageCache = scopecache.Cache[scopeUsage]

// addUsage charges one record of bytes to scope, if the cache knows it.
func addUsage(c *usageCache, scope string, bytes int64) {
	c.Update(scope, func(u *scopeUsage) {
		u.entries++
		u.bytes += bytes
	})
}

// bounded reports whether scope's records are bounded: every non-empty scope
// is (the empty scope, one for everyone, has no share to keep).
func (s *Store) bounded(scope string) bool { return scope != "" }

// over reports whether u is at or past the scope's share.
func (s *Store) over(u scopeUsage) bool {
	return u.entries >= s.cfg.scopeMaxEntries || u.bytes >= s.cfg.scopeMaxBytes
}

// countDue reports whether a claim of scope counts its records: when the
// process does not know it, or its count is older than the scope's headroom
// allows (usageRecount, usageRefresh).
func (s *Store) countDue(scope string) bool {
	if !s.bounded(scope) {
		return false
	}
	u, ok := s.usage.Get(scope)
	if !ok {
		return true
	}
	every := usageRecount
	if 2*u.entries >= s.cfg.scopeMaxEntries || 2*u.bytes >= s.cfg.scopeMaxBytes {
		every = usageRefresh
	}
	return s.now().Sub(u.at) >= every
}

// admit returns an error wrapping ErrScopeFull when req's scope holds its
// share, as the process knows it.
func (s *Store) admit(req server.Request) error {
	if !s.bounded(req.Scope) {
		return nil
	}
	u, ok := s.usage.Get(req.Scope)
	if !ok || !s.over(u) {
		return nil
	}
	return fmt.Errorf("%w (%d records, %d bytes; at most %d and %d)", ErrScopeFull, u.entries, u.bytes,
		s.cfg.scopeMaxEntries, s.cfg.scopeMaxBytes)
}

// charge is what the record of resp for req is counted as, in bytes, until
// the next count of its scope.
func charge(req server.Request, owner string, resp *server.Response) int64 {
	n := len(req.Scope) + len(req.Key) + len(req.Fingerprint) + len(owner) + len(resp.Body) + rowOverhead
	for k, vs := range resp.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 8 // two array elements' length words
		}
	}
	return int64(n)
}
