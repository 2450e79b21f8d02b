package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
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
	return fingerprint(r, 'r', body)
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
	var stack [1024]byte // the canonical form of a small body stays on the stack
	if c, ok := appendCanonicalJSON(stack[:0], body); ok {
		return fingerprint(r, 'j', c)
	}
	return fingerprint(r, 'r', body)
}

// fingerprint hashes the method and the path with its raw query, each followed
// by a NUL (neither can contain one, so fields cannot run into each other),
// then the domain byte (raw or canonical JSON) and the body. The body is
// hashed where it is, never copied.
func fingerprint(r *http.Request, domain byte, body []byte) string {
	var target [256]byte // grows on the heap only for a longer method and path
	h := sha256.New()
	h.Write(appendTarget(target[:0], r.Method, r.URL.EscapedPath(), r.URL, domain))
	h.Write(body)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

func appendTarget(b []byte, method, path string, u *url.URL, domain byte) []byte {
	b = append(b, method...)
	b = append(b, 0)
	b = append(b, path...)
	if u.RawQuery != "" || u.ForceQuery {
		b = append(b, '?')
		b = append(b, u.RawQuery...)
	}
	return append(b, 0, domain)
}
