package memstore

import (
	"container/heap"
	"sync"
	"time"

	"github.com/idemkit/idem/server"
)

// numShards is how many independently locked maps a Store has.
const numShards = 32

// recordKey is the identity of a record: keys are scoped.
type recordKey struct {
	scope, key string
}

// An entry is a claim (owner != 0) or a finished record (owner == 0).
type entry struct {
	key         recordKey
	fingerprint string

	// Claim state.
	owner     uint64
	claimedAt time.Time
	lockTTL   time.Duration

	// Record state.
	resp    *server.Response // immutable once stored: read outside the lock
	expires time.Time
	index   int // position in shard.expiry, -1 when not there
}

// A shard is one locked map plus a min-heap of its finished records by expiry,
// so that expired records are found in O(log n) each. Claims are never in the
// heap: they are live while their handler runs.
type shard struct {
	mu     sync.Mutex
	m      map[recordKey]*entry
	expiry expiryHeap
}

// expiryHeap implements heap.Interface over finished records, earliest first.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.index = -1
	*h = old[:n-1]
	return e
}

// remove deletes e from the map and the heap. The caller holds sh.mu.
func (sh *shard) remove(e *entry) {
	delete(sh.m, e.key)
	if e.index >= 0 {
		heap.Remove(&sh.expiry, e.index)
	}
}

// sweep removes up to limit expired records and reports how many it removed.
// The caller holds sh.mu.
func (sh *shard) sweep(now time.Time, limit int) int {
	n := 0
	for n < limit && len(sh.expiry) > 0 && !now.Before(sh.expiry[0].expires) {
		e := heap.Pop(&sh.expiry).(*entry)
		delete(sh.m, e.key)
		n++
	}
	return n
}

// addRecord puts a finished record in the expiry heap. The caller holds sh.mu.
func (sh *shard) addRecord(e *entry) { heap.Push(&sh.expiry, e) }
