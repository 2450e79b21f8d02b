package idem

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
)

// TestKeyForVectors pins KeyFor to literal UUIDs, computed outside Go (Python's
// uuid.uuid5): a change of the derivation would change every caller's keys
// between releases.
func TestKeyForVectors(t *testing.T) {
	t.Parallel()
	for _, v := range []struct{ namespace, id, want string }{
		{"orders", "42", "7ff616ff-70b6-54f6-9388-f8b6e71574f0"},
		{"refunds", "r-7", "da2282cd-8567-5af9-83f1-1013d305ecb6"},
		{"", "", "8288ae25-b6b1-5cc3-9d32-b18636a16fcd"},
	} {
		assert.Equal(t, v.want, KeyFor(v.namespace, v.id), "KeyFor(%q, %q)", v.namespace, v.id)
	}
	assert.NotEqual(t, KeyFor("orders", "42"), KeyFor("orders4", "2"))
}

// TestDeriveKeyVectors pins DeriveKey to literal UUIDs computed outside Go;
// the length prefix keeps ("a", "bc") and ("ab", "c") apart.
func TestDeriveKeyVectors(t *testing.T) {
	t.Parallel()
	for _, v := range []struct{ parent, step, want string }{
		{"a3bb189e-8bf9-3888-9912-ace4e6543002", "charge", "0a73039d-b6fe-5938-97a7-e5696300747a"},
		{"a", "bc", "ff8cfaa0-cc25-5bd2-9d24-ccbc63891f2c"},
		{"ab", "c", "d1398b5c-8145-57fb-9ccc-df9202df63c4"},
		{"", "", "23462b26-5c24-5ae1-80e6-67d5746452c5"},
	} {
		assert.Equal(t, v.want, DeriveKey(v.parent, v.step), "DeriveKey(%q, %q)", v.parent, v.step)
	}
}

// TestParseKey: the client reads a caller's header with the shared grammar
// (its table is internal/keyformat's); an error matches ErrInvalidKey.
func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, key string
		ok          bool
	}{
		{"abc", "abc", true},
		{`"abc"`, "abc", true},
		{" abc", "abc", true},   // the server accepts it: so does the client
		{`"abc" `, "abc", true}, // likewise
		{` "abc"`, "abc", true}, // likewise
		{`"a b"`, "", false},    // a space is allowed in an sf-string but not in a key
		{`""`, "", false},
		{`"abc`, "", false},
		{strings.Repeat("x", 256), "", false},
		{`"` + strings.Repeat("x", 255) + `"`, strings.Repeat("x", 255), true},
	}
	for _, tt := range tests {
		got, err := parseKey(tt.header)
		if (err == nil) != tt.ok || got != tt.key {
			t.Errorf("parseKey(%q) = %q, %v; want %q, ok=%v", tt.header, got, err, tt.key, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("parseKey(%q) error %v does not match ErrInvalidKey", tt.header, err)
		}
	}
}

func TestReplayed(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"true": true, "TRUE": true, " true ": true, "false": false, "": false, "1": false} {
		resp := &http.Response{Header: http.Header{}}
		if v != "" {
			resp.Header.Set("Idempotent-Replayed", v)
		}
		if got := Replayed(resp); got != want {
			t.Errorf("Replayed(%q) = %v, want %v", v, got, want)
		}
	}
	if Replayed(nil) {
		t.Error("Replayed(nil) = true")
	}
}

// TestNewKeyIsARandomUUIDv4: the default generator's keys parse as UUIDs of
// version 4 and the RFC 9562 variant, in their canonical form, never repeat,
// and cost one allocation each (not parallel: AllocsPerRun).
func TestNewKeyIsARandomUUIDv4(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		k := newKey()
		u, err := uuid.Parse(k)
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		if u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != k {
			t.Fatalf("%q: version %v, variant %v, canonical %q", k, u.Version(), u.Variant(), u.String())
		}
		if seen[k] {
			t.Fatalf("%q twice", k)
		}
		seen[k] = true
	}
	want := 1.0
	if raceEnabled {
		want++ // crypto/rand.Read's buffer escapes under the race detector
	}
	if n := testing.AllocsPerRun(100, func() { _ = newKey() }); n > want {
		t.Errorf("%v allocations per key, want %v", n, want)
	}
}
