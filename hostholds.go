package idem

import (
	"sync"
	"sync/atomic"
	"time"
)

// hostHolds is the table of hosts held back after a 429 or 503 with
// Retry-After: every operation sharing the Budget waits for the time the host
// named, not only the operation that was told. It holds at most a given number
// of hosts. The zero value is an empty table.
type hostHolds struct {
	mu      sync.Mutex
	holds   map[string]time.Time
	n       atomic.Int64 // len(holds), read without mu
	lastNow time.Time    // the latest now given to until, for pruning
}

// hold holds host back until the given time; of two holds on one host the
// later wins. With limit holds already in the table, expired holds are
// dropped first; if it is still full, the hold that ends soonest gives way
// (the new one itself, if it ends sooner than all the others). A limit of 0
// holds nothing.
func (t *hostHolds) hold(host string, until time.Time, limit int) {
	if limit == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !until.After(t.lastNow) {
		return // already over
	}
	if cur, ok := t.holds[host]; ok {
		if until.After(cur) {
			t.holds[host] = until
		}
		return
	}
	if t.holds == nil {
		t.holds = make(map[string]time.Time)
	}
	if len(t.holds) >= limit {
		for h, u := range t.holds {
			if !u.After(t.lastNow) {
				delete(t.holds, h)
			}
		}
	}
	if len(t.holds) >= limit {
		var first string
		var firstUntil time.Time
		for h, u := range t.holds {
			if firstUntil.IsZero() || u.Before(firstUntil) {
				first, firstUntil = h, u
			}
		}
		if !until.After(firstUntil) {
			return // the new hold is the one that ends soonest
		}
		delete(t.holds, first)
	}
	t.holds[host] = until
	t.n.Store(int64(len(t.holds)))
}

// until returns the time until which host is held, or the zero time if it is
// not held at now. An expired hold is dropped when seen.
func (t *hostHolds) until(host string, now time.Time) time.Time {
	if t.n.Load() == 0 {
		return time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.After(t.lastNow) {
		t.lastNow = now
	}
	until, ok := t.holds[host]
	if !ok {
		return time.Time{}
	}
	if !until.After(now) {
		delete(t.holds, host)
		t.n.Store(int64(len(t.holds)))
		return time.Time{}
	}
	return until
}
