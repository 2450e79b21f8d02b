package memstore

import "sync"

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

	// owner is the claim's token, unique in its shard; 0 once the entry is a
	// record. A claim's entry is never handed to another owner: a new claim is
	// a new entry.
	owner uint64
	// deadline, in the store's clock (see Store.clock), is the end of the
	// claim's lease for a claim and the expiry for a record.
	deadline int64

	// resp is nil while the entry is a claim and points at stored once it is
	// a record, so that one allocation holds both; stored is immutable from
	// then on and read outside the lock.
	resp   *record
	stored record
	index  int // position in shard.expiry, -1 when not there
	// cost is what the entry is charged against the byte bounds: its claim,
	// plus its record once it has one.
	cost int64
	// done is made by the first duplicate that waits for the claim, and
	// closed when the claim is recorded or released; nil if nobody waits.
	done chan struct{}
}

// A shard is one locked map plus a min-heap of its finished records by expiry,
// so that expired records are found in O(log n) each. Claims are never in the
// heap: they are live while their handler runs.
type shard struct {
	mu     sync.Mutex
	tokens uint64 // the last owner token given
	m      map[recordKey]*entry
	// expiry is the heap of records; expiryAt[i] is expiry[i].deadline, kept
	// beside it so that comparisons read one slice, not every entry.
	expiry   []*entry
	expiryAt []int64
	_        [64]byte // keeps shards that are used together on other cache lines
}

// remove deletes e from the map and the heap. The caller holds sh.mu.
func (sh *shard) remove(e *entry) {
	delete(sh.m, e.key)
	if e.index >= 0 {
		sh.removeAt(e.index)
	}
}

// sweep removes up to limit records expired at now, calling removed for each,
// and reports how many it removed. The caller holds sh.mu.
func (sh *shard) sweep(now int64, limit int, removed func(*entry)) int {
	n := 0
	for n < limit && len(sh.expiryAt) > 0 && now >= sh.expiryAt[0] {
		e := sh.removeAt(0)
		delete(sh.m, e.key)
		removed(e)
		n++
	}
	return n
}

// addRecord puts a finished record in the expiry heap. The caller holds sh.mu.
func (sh *shard) addRecord(e *entry) {
	e.index = len(sh.expiry)
	sh.expiry = append(sh.expiry, e)
	sh.expiryAt = append(sh.expiryAt, e.deadline)
	sh.up(e.index)
}

// removeAt removes and returns the record at position i of the heap.
func (sh *shard) removeAt(i int) *entry {
	last := len(sh.expiry) - 1
	if i != last {
		sh.swap(i, last)
		if !sh.down(i, last) {
			sh.up(i)
		}
	}
	e := sh.expiry[last]
	sh.expiry[last] = nil
	sh.expiry = sh.expiry[:last]
	sh.expiryAt = sh.expiryAt[:last]
	e.index = -1
	return e
}

func (sh *shard) swap(i, j int) {
	sh.expiry[i], sh.expiry[j] = sh.expiry[j], sh.expiry[i]
	sh.expiryAt[i], sh.expiryAt[j] = sh.expiryAt[j], sh.expiryAt[i]
	sh.expiry[i].index = i
	sh.expiry[j].index = j
}

// up moves the element at j towards the root while it expires earlier than
// its parent.
func (sh *shard) up(j int) {
	for j > 0 {
		i := (j - 1) / 2 // parent
		if sh.expiryAt[j] >= sh.expiryAt[i] {
			return
		}
		sh.swap(i, j)
		j = i
	}
}

// down moves the element at i0 away from the root, within the first n
// elements, while a child expires earlier; it reports whether it moved.
func (sh *shard) down(i0, n int) bool {
	i := i0
	for {
		j := 2*i + 1
		if j >= n || j < 0 { // j < 0: int overflow
			break
		}
		if r := j + 1; r < n && sh.expiryAt[r] < sh.expiryAt[j] {
			j = r
		}
		if sh.expiryAt[j] >= sh.expiryAt[i] {
			break
		}
		sh.swap(i, j)
		i = j
	}
	return i > i0
}
