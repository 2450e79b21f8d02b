package idem

import (
	"sync"
	"testing"

	"github.com/google/uuid"
)

func TestFormatUUIDv4(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   [16]byte
		want string
	}{
		{"zeros", [16]byte{}, "00000000-0000-4000-8000-000000000000"},
		{"ones", [16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff,
			8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff},
			"ffffffff-ffff-4fff-bfff-ffffffffffff"},
		{"counting", [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10},
			"01234567-89ab-4def-bedc-ba9876543210"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := tc.in
			got := formatUUIDv4(&u)
			if got != tc.want {
				t.Errorf("formatUUIDv4(%x) = %s, want %s", tc.in, got, tc.want)
			}
			if want := uuid.UUID(u).String(); got != want {
				t.Errorf("formatUUIDv4 = %s, uuid's String = %s", got, want)
			}
		})
	}
}

// TestNewKeyV4 pins that generated keys are canonical RFC 9562 version 4
// UUIDs, all different, with every one of their 122 random bits seen both set
// and clear (a stuck bit, or bytes reused between keys, would show).
func TestNewKeyV4(t *testing.T) {
	t.Parallel()
	const n = 4 * randBlock // several refills of a source
	seen := make(map[string]bool, n)
	var ones, zeros [16]byte
	for range n {
		k := newKeyV4()
		if seen[k] {
			t.Fatalf("key %s generated twice", k)
		}
		seen[k] = true
		u, err := uuid.Parse(k)
		if err != nil || len(k) != 36 || u.String() != k {
			t.Fatalf("key %q is not a canonical UUID: %v", k, err)
		}
		if u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("key %s: version %d, variant %v", k, u.Version(), u.Variant())
		}
		for i, b := range u {
			ones[i] |= b
			zeros[i] |= ^b
		}
	}
	// Fixed bits: the version nibble 0100 in byte 6, the variant 10 in byte 8.
	wantOnes := [16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0x4f, 7: 0xff,
		8: 0xbf, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}
	wantZeros := [16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xbf, 7: 0xff,
		8: 0x7f, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}
	if ones != wantOnes || zeros != wantZeros {
		t.Errorf("bits seen set %x, clear %x; want %x, %x", ones, zeros, wantOnes, wantZeros)
	}
}

// TestNewKeyV4Concurrent: goroutines sharing the pooled sources never get the
// same key (run with -race).
func TestNewKeyV4Concurrent(t *testing.T) {
	t.Parallel()
	const goroutines, per = 8, 500
	keys := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range per {
				keys[g] = append(keys[g], newKeyV4())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*per)
	for _, ks := range keys {
		for _, k := range ks {
			if seen[k] {
				t.Fatalf("key %s generated twice", k)
			}
			seen[k] = true
		}
	}
}

// TestDefaultKeyGeneratorIsV4: a POST without a key gets a fresh UUIDv4.
func TestDefaultKeyGeneratorIsV4(t *testing.T) {
	t.Parallel()
	f := &fakeRT{steps: statusSteps(200)}
	tr := NewTransport(f)
	for range 2 {
		resp, err := tr.RoundTrip(mustRequest(t, t.Context(), "POST", "http://x/", "{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	calls := f.Calls()
	for _, c := range calls {
		u, err := uuid.Parse(c.key[0])
		if err != nil || u.Version() != 4 {
			t.Errorf("key %q: %v, version %d", c.key[0], err, u.Version())
		}
	}
	if calls[0].key[0] == calls[1].key[0] {
		t.Error("two operations shared a key")
	}
}

func BenchmarkKeyGen(b *testing.B) {
	for _, bc := range []struct {
		name string
		gen  func() string
	}{{"uuid.NewString", uuid.NewString}, {"newKeyV4", newKeyV4}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = bc.gen()
			}
		})
	}
}
