package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/idemkit/idem/server"
)

// errNoScope is the scope function's error for a request without the
// scope header (or with several lines of it); the middleware answers
// 401 and neither the store nor the upstream sees the request.
var errNoScope = errors.New("no usable scope header")

// Scope returns the gateway's scope function: server.BearerScope (the
// Authorization header; a request without one is refused, 401) by default,
// or, with a header name, the value of that header, hashed so that the
// store never holds it: one line, not blank, else 401. Either way the scope is
// what the caller sends, not what an authentication checked: the gateway
// forwards the credentials to the upstream, which authenticates the request,
// but keys are kept apart by the header's value alone (see docs/gateway.md).
func Scope(header string) func(*http.Request) (string, error) {
	if header == "" {
		return server.BearerScope
	}
	name := http.CanonicalHeaderKey(header)
	return func(r *http.Request) (string, error) {
		vs := r.Header[name]
		if len(vs) != 1 || strings.TrimSpace(vs[0]) == "" {
			return "", errNoScope
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(vs[0])))
		return "header:" + hex.EncodeToString(sum[:]), nil
	}
}
