package server

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
)

// A Fingerprint identifies the content of a request, so that a key reused for
// a different request is detected (422). It is called once per protected
// request, before the handler runs, with the exact body bytes received; it
// must not read r.Body and must return the same string for the same request.
// The result is stored; it should be short (a hex digest).
type Fingerprint func(r *http.Request, body []byte) string

// ExactBody, the default Fingerprint, is the hex SHA-256 of the method, the
// path with its raw query, and the exact body bytes: the same JSON with other
// whitespace or key order is a different request.
func ExactBody(r *http.Request, body []byte) string {
	h := sha256.New()
	writeTarget(h, r)
	h.Write([]byte{'r'})
	h.Write(body)
	return sumHex(h)
}

// CanonicalJSON is a Fingerprint like ExactBody, except that a body that is
// one valid JSON value (UTF-8, no duplicate object keys) is hashed in a
// canonical form: object keys sorted, insignificant whitespace dropped and
// string escapes resolved. So {"a":1, "b":2} and {"b":2,"a":1} are the same
// request. Numbers are compared by their literal text (1 and 1.0 differ). A body
// that is not such a value (empty, not JSON, invalid UTF-8, duplicate keys) is
// not rejected: it falls back to its exact bytes, in a separate domain, so it
// never equals a canonicalised body; the handler decides whether it is valid.
func CanonicalJSON(r *http.Request, body []byte) string {
	h := sha256.New()
	writeTarget(h, r)
	if c, ok := canonicalJSON(body); ok {
		h.Write([]byte{'j'})
		h.Write(c)
	} else {
		h.Write([]byte{'r'})
		h.Write(body)
	}
	return sumHex(h)
}

// writeTarget hashes the method and the path with its raw query, each followed
// by a NUL (neither can contain one), so that fields cannot run into each other.
func writeTarget(h hash.Hash, r *http.Request) {
	var buf [256]byte
	b := append(buf[:0], r.Method...)
	b = append(b, 0)
	b = append(b, r.URL.EscapedPath()...)
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		b = append(b, '?')
		b = append(b, r.URL.RawQuery...)
	}
	b = append(b, 0)
	h.Write(b)
}

// sumHex returns h's digest in lower-case hex.
func sumHex(h hash.Hash) string {
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h.Sum(sum[:0]))
	return string(out[:])
}
