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
	if c, ok := canonicalJSON(body); ok {
		return fingerprint(r, 'j', c)
	}
	return fingerprint(r, 'r', body)
}

// smallInput is how much fingerprint hashes from a stack buffer in one call;
// larger inputs are streamed through a hash.Hash.
const smallInput = 2048

// fingerprint hashes the method and the path with its raw query, each followed
// by a NUL (neither can contain one, so fields cannot run into each other),
// then the domain byte (raw or canonical JSON) and the body.
func fingerprint(r *http.Request, domain byte, body []byte) string {
	path := r.URL.EscapedPath()
	var sum [sha256.Size]byte
	if len(r.Method)+len(path)+len(r.URL.RawQuery)+4+len(body) <= smallInput {
		var stack [smallInput]byte
		b := appendTarget(stack[:0], r.Method, path, r.URL, domain)
		sum = sha256.Sum256(append(b, body...))
	} else {
		sum = hashLarge(appendTarget(nil, r.Method, path, r.URL, domain), body)
	}
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

func hashLarge(target, body []byte) (sum [sha256.Size]byte) {
	h := sha256.New()
	h.Write(target)
	h.Write(body)
	h.Sum(sum[:0])
	return sum
}
