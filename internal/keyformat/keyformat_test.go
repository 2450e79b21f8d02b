package keyformat

import (
	"errors"
	"strings"
	"testing"
)

// The one table of the Idempotency-Key grammar: both halves of idem read keys
// with Parse, so these answers are the client's and the server's alike.
var parseCases = []struct {
	name, in, want string
	err            error // ErrMissing, or errMalformed for any *Error
}{
	{"raw", "abc-123", "abc-123", nil},
	{"uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
	{"quoted", `"abc-123"`, "abc-123", nil},
	{"ows around raw", " \tabc \t", "abc", nil},
	{"leading space raw", " abc", "abc", nil},
	{"trailing space raw", "abc ", "abc", nil},
	{"ows around quoted", `  "abc"  `, "abc", nil},
	{"leading space quoted", ` "abc"`, "abc", nil},
	{"trailing space quoted", `"abc" `, "abc", nil},
	{"escaped quote", `"a\"b"`, `a"b`, nil},
	{"escaped backslash", `"a\\b"`, `a\b`, nil},
	{"raw with quote inside", `a"b`, `a"b`, nil},
	{"raw punctuation", `!#$%&'()*+,-./:;<=>?@[\]^_{|}~`, `!#$%&'()*+,-./:;<=>?@[\]^_{|}~`, nil},
	{"longest raw", strings.Repeat("k", 255), strings.Repeat("k", 255), nil},
	{"longest quoted", `"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255), nil},
	{"absent", "", "", ErrMissing},
	{"blank", "  \t ", "", ErrMissing},
	{"too long raw", strings.Repeat("k", 256), "", errMalformed},
	{"too long quoted", `"` + strings.Repeat("k", 256) + `"`, "", errMalformed},
	{"inner space", "a b", "", errMalformed},
	{"inner space quoted", `"a b"`, "", errMalformed},
	{"tab inside", "a\tb", "", errMalformed},
	{"non ascii", "clé", "", errMalformed},
	{"non ascii quoted", `"clé"`, "", errMalformed},
	{"DEL", "a\x7fb", "", errMalformed},
	{"NUL", "a\x00b", "", errMalformed},
	{"empty quoted", `""`, "", errMalformed},
	{"lone quote", `"`, "", errMalformed},
	{"unterminated", `"abc`, "", errMalformed},
	{"bad escape", `"a\nb"`, "", errMalformed},
	{"escape at end", `"abc\`, "", errMalformed},
	{"escaped closing quote only", `"abc\"`, "", errMalformed},
	{"after closing quote", `"abc"x`, "", errMalformed},
	{"parameters", `"abc";a=1`, "", errMalformed},
	{"two strings", `"a" "b"`, "", errMalformed},
	{"list", `"a", "b"`, "", errMalformed},
}

var errMalformed = errors.New("malformed (any *Error)")

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.in, 0)
			switch c.err {
			case nil:
				if err != nil || got != c.want {
					t.Fatalf("Parse(%q) = %q, %v; want %q", c.in, got, err, c.want)
				}
			case ErrMissing:
				if err != ErrMissing {
					t.Fatalf("Parse(%q) = %q, %v; want ErrMissing", c.in, got, err)
				}
			default:
				var e *Error
				if !errors.As(err, &e) || e.Reason == "" {
					t.Fatalf("Parse(%q) = %q, %v; want an *Error with a reason", c.in, got, err)
				}
			}
		})
	}
}

func TestParseMax(t *testing.T) {
	t.Parallel()
	if _, err := Parse("abcd", 3); err == nil {
		t.Fatal(`Parse("abcd", 3) accepted 4 characters`)
	}
	if k, err := Parse(`"abc"`, 3); err != nil || k != "abc" {
		t.Fatalf(`Parse("\"abc\"", 3) = %q, %v`, k, err)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key    string
		quoted bool
		want   string // "" means an error
	}{
		{"abc", false, "abc"},
		{"abc", true, `"abc"`},
		{`a"b\c`, true, `"a\"b\\c"`},
		{`a"b`, false, `a"b`},
		{`"abc"`, false, ""}, // would read as the key abc
		{`"abc"`, true, `"\"abc\""`},
		{"", false, ""},
		{"a b", true, ""},
		{strings.Repeat("k", 256), false, ""},
	} {
		got, err := Format(c.key, c.quoted)
		if c.want == "" {
			if err == nil {
				t.Errorf("Format(%q, %v) = %q, want an error", c.key, c.quoted, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Format(%q, %v) = %q, %v; want %q", c.key, c.quoted, got, err, c.want)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	for _, in := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`} {
		if n := testing.AllocsPerRun(100, func() { _, _ = Parse(in, 0) }); n != 0 {
			t.Errorf("Parse(%q) allocates %v times, want 0", in, n)
		}
	}
}

// FuzzParse checks that Parse never panics, that what it accepts is a valid
// key, and that every key Format writes reads back as itself.
func FuzzParse(f *testing.F) {
	for _, c := range parseCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := Parse(v, 0)
		if err == nil {
			if cerr := Check(k, 0); cerr != nil {
				t.Fatalf("Parse(%q) = %q, which Check rejects: %v", v, k, cerr)
			}
			for _, quoted := range []bool{false, true} {
				s, ferr := Format(k, quoted)
				if ferr != nil {
					if quoted || k[0] != '"' {
						t.Fatalf("Format(%q, %v): %v", k, quoted, ferr)
					}
					continue
				}
				if back, perr := Parse(s, 0); perr != nil || back != k {
					t.Fatalf("Parse(Format(%q, %v)) = %q, %v", k, quoted, back, perr)
				}
			}
		}
	})
}
