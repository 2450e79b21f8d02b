package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/keyformat"
)

// TestParseKey checks how the server maps the shared grammar's answers to its
// errors; the grammar itself has its one table in internal/keyformat.
func TestParseKey(t *testing.T) {
	t.Parallel()
	if MaxKeyLength != keyformat.MaxLen {
		t.Fatalf("MaxKeyLength %d, the shared grammar's MaxLen %d", MaxKeyLength, keyformat.MaxLen)
	}
	cases := []struct {
		name, in, want string
		err            error
	}{
		{"raw", "abc-123", "abc-123", nil},
		{"quoted", `"abc-123"`, "abc-123", nil},
		{"leading space, as the client may send it", " abc", "abc", nil},
		{"trailing space after quotes", `"abc" `, "abc", nil},
		{"absent", "", "", ErrMissingKey},
		{"blank", "  \t ", "", ErrMissingKey},
		{"inner space", "a b", "", ErrInvalidKey},
		{"unterminated", `"abc`, "", ErrInvalidKey},
		{"too long", strings.Repeat("k", MaxKeyLength+1), "", ErrInvalidKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseKey(c.in)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("ParseKey(%q) = %q, %v; want error %v", c.in, got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
}

func TestParseKeyMaxLength(t *testing.T) {
	t.Parallel()
	if _, err := parseKey("abcd", 3); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("4 characters with a limit of 3: err %v, want ErrInvalidKey", err)
	}
	if k, err := parseKey(`"abc"`, 3); err != nil || k != "abc" {
		t.Fatalf("quoted 3 characters with a limit of 3: %q, %v", k, err)
	}
}

func TestParseKeyAllocs(t *testing.T) {
	for _, in := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`} {
		if n := testing.AllocsPerRun(100, func() { _, _ = ParseKey(in) }); n != 0 {
			t.Errorf("ParseKey(%q) allocates %v times, want 0", in, n)
		}
	}
}

// quoteSF serialises k as an RFC 8941 sf-string.
func quoteSF(k string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `"abc`, `"a\x"`, " a ", "", `""`, `"a";b`, "\x80", `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		k, err := ParseKey(in)
		if err != nil {
			if !errors.Is(err, ErrMissingKey) && !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): untyped error %v", in, err)
			}
			return
		}
		if len(k) < 1 || len(k) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d", in, k, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x21 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x", in, k, k[i])
			}
		}
		// The quoted form of a key is the same key.
		if k2, err := ParseKey(quoteSF(k)); err != nil || k2 != k {
			t.Fatalf("ParseKey(quote(%q)) = %q, %v", k, k2, err)
		}
		// The raw form too, unless the key itself starts with a quote.
		if k[0] != '"' {
			if k2, err := ParseKey(k); err != nil || k2 != k {
				t.Fatalf("ParseKey(%q) raw = %q, %v", k, k2, err)
			}
		}
	})
}
