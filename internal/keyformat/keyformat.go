// Package keyformat is the one grammar of the Idempotency-Key header that both
// halves of idem use: the client (package idem) checks with it the keys it
// sends, the server (package server) parses with it the keys it receives, so a
// key the client sends is exactly a key the server accepts.
//
// A field value is read as follows. Optional whitespace (spaces and tabs)
// around it is ignored. A value that starts with a double quote is an RFC 8941
// sf-string, as the IETF draft (draft-ietf-httpapi-idempotency-key-header)
// specifies: the closing quote must end the value (no parameters), and the
// only escapes are \" and \\. Any other value is the key itself, as Stripe and
// most servers read it; so "abc" (quoted) and abc are one key. The key must
// then be 1 to MaxLen characters of visible ASCII (0x21 to 0x7E).
package keyformat

import (
	"errors"
	"strconv"
	"strings"
)

// MaxLen is the longest key, in characters.
const MaxLen = 255

// ErrMissing means the field value is absent or blank.
var ErrMissing = errors.New("missing key")

// Error is a malformed key: Reason says what is wrong with it.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// Parse parses one field value with keys of at most max characters (max <= 0
// means MaxLen) and returns the key. A blank value returns ErrMissing; any
// other problem an *Error. It does not allocate unless the value holds
// escapes or is malformed.
func Parse(value string, max int) (string, error) {
	v := TrimOWS(value)
	if v == "" {
		return "", ErrMissing
	}
	key := v
	if v[0] == '"' {
		var err error
		if key, err = parseSFString(v); err != nil {
			return "", err
		}
	}
	if err := Check(key, max); err != nil {
		return "", err
	}
	return key, nil
}

// Check reports whether key, already decoded, is 1 to max characters (max <= 0
// means MaxLen) of visible ASCII.
func Check(key string, max int) error {
	if max <= 0 {
		max = MaxLen
	}
	if key == "" {
		return &Error{Reason: "empty key"}
	}
	if len(key) > max {
		return &Error{Reason: "longer than " + strconv.Itoa(max) + " characters"}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return &Error{Reason: "character " + hexByte(c) + " at offset " + strconv.Itoa(i) + " is not visible ASCII"}
		}
	}
	return nil
}

// Format returns the field value that carries key: key itself (raw), or, when
// quoted, an sf-string. It fails when the key is not valid, and when a raw
// key starts with a double quote (it would read as an sf-string), so that
// Parse(Format(key)) == key whenever Format succeeds.
func Format(key string, quoted bool) (string, error) {
	if err := Check(key, MaxLen); err != nil {
		return "", err
	}
	if !quoted {
		if key[0] == '"' {
			return "", &Error{Reason: "starts with a double quote, which reads as a Structured Field string"}
		}
		return key, nil
	}
	n := len(key) + 2 + strings.Count(key, `"`) + strings.Count(key, `\`)
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String(), nil
}

// parseSFString parses v, which starts with a double quote, as a complete
// RFC 8941 sf-string and returns its content.
func parseSFString(v string) (string, error) {
	var buf []byte // nil until the first escape
	start := 1
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 >= len(v) {
				return "", &Error{Reason: "unterminated escape in quoted key"}
			}
			next := v[i+1]
			if next != '"' && next != '\\' {
				return "", &Error{Reason: "bad escape \\" + strconv.QuoteToASCII(v[i+1:i+2]) +
					" in quoted key (only \\\" and \\\\)"}
			}
			buf = append(buf, v[start:i]...)
			buf = append(buf, next)
			i++
			start = i + 1
		case c == '"':
			if i != len(v)-1 {
				return "", &Error{Reason: "characters after the closing quote"}
			}
			if buf == nil {
				return v[1:i], nil
			}
			return string(append(buf, v[start:i]...)), nil
		case c < 0x20 || c > 0x7e:
			return "", &Error{Reason: "character " + hexByte(c) + " in quoted key"}
		}
	}
	return "", &Error{Reason: "missing closing quote"}
}

// TrimOWS removes leading and trailing spaces and horizontal tabs.
func TrimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// hexByte writes c as 0xNN.
func hexByte(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{'0', 'x', digits[c>>4], digits[c&0x0f]})
}
