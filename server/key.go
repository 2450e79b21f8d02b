package server

import (
	"errors"
	"fmt"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is the response header that marks a replayed response; its
// value is "true". It is never sent on a first execution.
const HeaderReplayed = "Idempotent-Replayed"

// Errors of ParseKey, matched with errors.Is.
var (
	// ErrMissingKey: the header is absent or blank.
	ErrMissingKey = errors.New("idem/server: missing Idempotency-Key")
	// ErrInvalidKey: the key is too long, not visible ASCII, or a malformed
	// Structured Field string.
	ErrInvalidKey = errors.New("idem/server: invalid Idempotency-Key")
)

// ParseKey parses one Idempotency-Key field value and returns the key.
//
// Optional whitespace (spaces, tabs) around the value is ignored. A value that
// starts with a double quote is an RFC 8941 sf-string, as the IETF draft
// specifies: it must end with the closing quote, with nothing after it (no
// parameters), and the only escapes are \" and \\. Any other value is the key
// itself, as most servers and Stripe read it. So "abc" (quoted) and abc are the
// same key.
//
// The key must be 1 to 255 characters of visible ASCII (0x21 to 0x7E): a space
// inside a key, quoted or not, makes it invalid. An absent or blank value
// returns an error wrapping ErrMissingKey; every other problem wraps
// ErrInvalidKey.
func ParseKey(value string) (string, error) {
	return parseKey(value, MaxKeyLength)
}

// parseKey is ParseKey with a configurable maximum length.
func parseKey(value string, max int) (string, error) {
	v := trimOWS(value)
	if v == "" {
		return "", ErrMissingKey
	}
	if v[0] != '"' {
		if err := checkKey(v, max); err != nil {
			return "", err
		}
		return v, nil
	}
	key, err := parseSFString(v)
	if err != nil {
		return "", err
	}
	if err := checkKey(key, max); err != nil {
		return "", err
	}
	return key, nil
}

// parseSFString parses v, which starts with a double quote, as a complete
// RFC 8941 sf-string and returns its content. It allocates only when the
// string contains escapes.
func parseSFString(v string) (string, error) {
	var buf []byte // nil until the first escape
	start := 1
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 >= len(v) {
				return "", fmt.Errorf("%w: unterminated escape in quoted key", ErrInvalidKey)
			}
			next := v[i+1]
			if next != '"' && next != '\\' {
				return "", fmt.Errorf("%w: bad escape \\%q in quoted key (only \\\" and \\\\)", ErrInvalidKey, next)
			}
			buf = append(buf, v[start:i]...)
			buf = append(buf, next)
			i++
			start = i + 1
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w: characters after the closing quote", ErrInvalidKey)
			}
			if buf == nil {
				return v[1:i], nil
			}
			return string(append(buf, v[start:i]...)), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: character 0x%02x in quoted key", ErrInvalidKey, c)
		}
	}
	return "", fmt.Errorf("%w: missing closing quote", ErrInvalidKey)
}

// checkKey applies the length and character rules to a parsed key.
func checkKey(k string, max int) error {
	if k == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(k) > max {
		return fmt.Errorf("%w: longer than %d characters", ErrInvalidKey, max)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: character 0x%02x at offset %d is not visible ASCII", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// trimOWS removes leading and trailing spaces and horizontal tabs.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
