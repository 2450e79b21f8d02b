package idem

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
)

func TestKeyForDeterministic(t *testing.T) {
	t.Parallel()
	a := KeyFor("orders", "42")
	if a != KeyFor("orders", "42") {
		t.Fatal("KeyFor is not deterministic")
	}
	// Pinned: a change of the derivation would change every caller's keys.
	ns := uuid.NewSHA1(uuid.NameSpaceURL, []byte("idem:orders"))
	if want := uuid.NewSHA1(ns, []byte("42")).String(); a != want {
		t.Fatalf("KeyFor = %s, want %s", a, want)
	}
	u, err := uuid.Parse(a)
	if err != nil || u.Version() != 5 {
		t.Fatalf("KeyFor = %s: not a UUIDv5 (%v)", a, err)
	}
	for _, other := range []string{KeyFor("orders", "43"), KeyFor("refunds", "42"), KeyFor("orders4", "2")} {
		if other == a {
			t.Errorf("KeyFor collision: %s", other)
		}
	}
}

func TestDeriveKey(t *testing.T) {
	t.Parallel()
	parent := "a3bb189e-8bf9-3888-9912-ace4e6543002"
	k := DeriveKey(parent, "charge")
	if k != DeriveKey(parent, "charge") {
		t.Fatal("DeriveKey is not deterministic")
	}
	if checkKey(k) != "" {
		t.Fatalf("DeriveKey gave an invalid key %q", k)
	}
	distinct := map[string]bool{k: true}
	for _, d := range []string{
		DeriveKey(parent, "refund"), DeriveKey("other", "charge"),
		DeriveKey("a", "bc"), DeriveKey("ab", "c"), DeriveKey("", "abc"),
	} {
		if distinct[d] {
			t.Errorf("DeriveKey collision: %s", d)
		}
		distinct[d] = true
	}
}

func TestUUIDv7(t *testing.T) {
	t.Parallel()
	a, b := UUIDv7(), UUIDv7()
	if a == b {
		t.Fatal("two UUIDv7 calls gave the same key")
	}
	u, err := uuid.Parse(a)
	if err != nil || u.Version() != 7 {
		t.Fatalf("UUIDv7 = %s: not a version 7 UUID (%v)", a, err)
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key string
		ok  bool
	}{
		{"abc", true},
		{strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), false},
		{"", false},
		{"has space", false},
		{"tab\t", false},
		{"ünïcode", false},
		{"del\x7f", false},
		{`"quoted"`, true},
		{"!~", true},
	}
	for _, tt := range tests {
		if got := checkKey(tt.key) == ""; got != tt.ok {
			t.Errorf("checkKey(%q) ok = %v, want %v", tt.key, got, tt.ok)
		}
	}
}

func TestSFString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		key    string // "" means malformed
	}{
		{`"abc"`, "abc"},
		{` "abc" `, "abc"},
		{`"a\"b"`, `a"b`},
		{`"a\\b"`, `a\b`},
		{`""`, ""},
		{`"abc`, ""},
		{`"a\b"`, ""},
		{`"a\"`, ""},
		{`"a"b"`, ""},
		{`"a" x`, ""},
		{"\"a\x01\"", ""},
		{"\"\xff\"", ""},
		{`"`, ""},
	}
	for _, tt := range tests {
		got, reason := decodeSFString(tt.header)
		if tt.key == "" && tt.header != `""` {
			if reason == "" {
				t.Errorf("decodeSFString(%q) = %q, want an error", tt.header, got)
			}
			continue
		}
		if reason != "" || got != tt.key {
			t.Errorf("decodeSFString(%q) = %q, %q; want %q", tt.header, got, reason, tt.key)
		}
	}
	if got := encodeSFString(`a"b\c`); got != `"a\"b\\c"` {
		t.Errorf("encodeSFString = %s", got)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, key string
		ok          bool
	}{
		{"abc", "abc", true},
		{`"abc"`, "abc", true},
		{`"a b"`, "", false}, // a space is allowed in an sf-string but not in a key
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

func TestKeyFromRequest(t *testing.T) {
	t.Parallel()
	req := mustRequest(t, context.Background(), http.MethodPost, "http://x/", "")
	if got := KeyFromRequest(req); got != "" {
		t.Errorf("no key: got %q", got)
	}
	if got := KeyFromRequest(nil); got != "" {
		t.Errorf("nil request: got %q", got)
	}
	ctxReq := req.WithContext(WithKey(context.Background(), "from-ctx"))
	if got := KeyFromRequest(ctxReq); got != "from-ctx" {
		t.Errorf("context key: got %q", got)
	}
	ctxReq.Header.Set(HeaderIdempotencyKey, `"from-header"`)
	if got := KeyFromRequest(ctxReq); got != "from-header" {
		t.Errorf("sf-string header wins over the context: got %q", got)
	}
}

func TestReplayed(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"true": true, "TRUE": true, " true ": true, "false": false, "": false, "1": false} {
		resp := &http.Response{Header: http.Header{}}
		if v != "" {
			resp.Header.Set(HeaderReplayed, v)
		}
		if got := Replayed(resp); got != want {
			t.Errorf("Replayed(%q) = %v, want %v", v, got, want)
		}
	}
	if Replayed(nil) {
		t.Error("Replayed(nil) = true")
	}
}

// FuzzSFStringRoundTrip checks that any printable-ASCII string survives
// encoding as an sf-string and decoding back.
func FuzzSFStringRoundTrip(f *testing.F) {
	for _, s := range []string{"", "abc", `a"b`, `a\b`, `\"\\`, "x y", strings.Repeat(`\`, 10)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				t.Skip("not printable ASCII: not representable as an sf-string")
			}
		}
		enc := encodeSFString(s)
		got, reason := decodeSFString(enc)
		if reason != "" || got != s {
			t.Fatalf("decode(encode(%q)) = %q, %q (encoded %s)", s, got, reason, enc)
		}
	})
}

// FuzzParseKey checks that parsing any header value never panics, and that an
// accepted key is valid, re-encodes to a value that parses to the same key,
// and is what KeyFromRequest reports.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"a\x"`, `"`, `""`, `"abc`, " \"k\" ", "\xff", strings.Repeat("k", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := parseKey(v)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("parseKey(%q): error %v does not match ErrInvalidKey", v, err)
			}
			return
		}
		if reason := checkKey(key); reason != "" {
			t.Fatalf("parseKey(%q) accepted invalid key %q: %s", v, key, reason)
		}
		if !utf8.ValidString(key) {
			t.Fatalf("parseKey(%q) = %q: not UTF-8", v, key)
		}
		for _, f := range []KeyFormat{KeyFormatRaw, KeyFormatString} {
			if again, err := parseKey(formatKey(key, f)); err != nil || again != key {
				if f == KeyFormatRaw && strings.HasPrefix(key, `"`) {
					continue // a raw key that starts with a quote reads as an sf-string
				}
				t.Fatalf("parseKey(formatKey(%q, %d)) = %q, %v", key, f, again, err)
			}
		}
		req := &http.Request{Header: http.Header{HeaderIdempotencyKey: {v}}}
		if got := KeyFromRequest(req); got != key {
			t.Fatalf("KeyFromRequest with header %q = %q, want %q", v, got, key)
		}
	})
}
