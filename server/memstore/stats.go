package memstore

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// Entries is how many records and claims the Store holds now, expired
	// records not yet swept included.
	Entries int
	// Bytes is what they cost against WithMaxBytes.
	Bytes int64
	// Evictions counts expired records removed, on access or to make room.
	// A live record is never evicted.
	Evictions uint64
	// FullRefusals counts calls of Do that failed with ErrFull or
	// ErrScopeFull.
	FullRefusals uint64
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Entries:      int(s.entries.Load()),
		Bytes:        s.bytes.Load(),
		Evictions:    s.evictions.Load(),
		FullRefusals: s.refusals.Load(),
	}
}
