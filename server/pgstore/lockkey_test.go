package pgstore

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
)

// TestLockKeyIsTheStreamedHash: lockKey hashes its parts in one buffer; the
// keys must stay those of the versions that streamed them into the hash one
// by one, or a claim of this version and one of the previous version (during
// a rolling upgrade) would take different locks for the same key.
func TestLockKeyIsTheStreamedHash(t *testing.T) {
	streamed := func(parts ...string) int64 {
		h := sha256.New()
		var n [8]byte
		for _, p := range parts {
			binary.BigEndian.PutUint64(n[:], uint64(len(p)))
			h.Write(n[:])
			h.Write([]byte(p))
		}
		return int64(binary.BigEndian.Uint64(h.Sum(nil)))
	}
	for _, parts := range [][]string{
		{"idem-key", "idem_keys", "tenant-a", "k"},
		{"idem-claim", "idem_keys", "", "", ""},
		{"idem-key", "schema.table", "scope", strings.Repeat("k", 300)}, // past the stack buffer
	} {
		if got, want := lockKey(parts...), streamed(parts...); got != want {
			t.Errorf("lockKey(%q) = %d; want %d", parts, got, want)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { lockKey("idem-key", "idem_keys", "tenant-a", "key-0123456789") }); allocs != 0 {
		t.Errorf("lockKey allocates %v times; want 0", allocs)
	}
}
