package server

import (
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/keyformat"
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
// The grammar is the one the idem client writes (internal/keyformat):
// optional whitespace (spaces, tabs) around the value is ignored. A value that
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
	key, err := keyformat.Parse(value, max)
	switch {
	case err == nil:
		return key, nil
	case errors.Is(err, keyformat.ErrMissing):
		return "", ErrMissingKey
	}
	return "", fmt.Errorf("%w: %v", ErrInvalidKey, err)
}
