package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// ErrBadCredentials is returned by BearerScope for a request whose
// Authorization header it cannot use (several header lines, or an empty
// bearer token); the middleware answers 401.
var ErrBadCredentials = errors.New("idem/server: unusable Authorization header")

// ErrNoCredentials is returned by BearerScope for a request without
// Authorization (or with a blank one); the middleware answers 401.
var ErrNoCredentials = errors.New("idem/server: no credentials: a key needs a caller to belong to")

// BearerScope is a scope function for WithScope that keys records by the
// caller's credentials without storing them: the scope is "bearer:" and the
// hex SHA-256 of the bearer token, so two tokens never share records. Another
// Authorization scheme (Basic, ...) is scoped the same way by the hash of the
// whole header value, under "auth:". It does not authenticate anything: put
// it behind the middleware that does.
//
// A request without credentials is refused (ErrNoCredentials, answered 401):
// anonymous callers would otherwise share one scope, where the same key and
// body replays another caller's response and a 422 tells a stranger that a
// key exists, which deterministic keys (KeyFor) make guessable. A service
// that serves anonymous callers on purpose writes its own scope function (a
// session, a device id) and says what the callers share.
func BearerScope(r *http.Request) (string, error) {
	vs := r.Header["Authorization"]
	switch len(vs) {
	case 0:
		return "", ErrNoCredentials
	case 1:
	default:
		return "", ErrBadCredentials
	}
	v := trimSpaceTab(vs[0])
	if v == "" {
		return "", ErrNoCredentials
	}
	if len(v) >= 7 && strings.EqualFold(v[:7], "bearer ") {
		tok := trimSpaceTab(v[7:])
		if tok == "" {
			return "", ErrBadCredentials
		}
		return hashScope("bearer:", tok), nil
	}
	if strings.EqualFold(v, "bearer") {
		return "", ErrBadCredentials
	}
	return hashScope("auth:", v), nil
}

func hashScope(prefix, secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return prefix + hex.EncodeToString(sum[:])
}
