package memstore

// countEntries counts the entries in every shard's map, checking on the way
// that each shard's expiry heap holds exactly its finished records.
func (s *Store) countEntries() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		records := 0
		for _, e := range sh.m {
			if e.owner == 0 {
				records++
				if e.index < 0 || e.index >= len(sh.expiry) || sh.expiry[e.index] != e {
					panic("memstore: record missing from its expiry heap")
				}
			}
		}
		if records != len(sh.expiry) {
			panic("memstore: expiry heap holds entries that are not records")
		}
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// sumCosts adds up what every entry in the maps is charged.
func (s *Store) sumCosts() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			n += e.cost
		}
		sh.mu.Unlock()
	}
	return n
}
