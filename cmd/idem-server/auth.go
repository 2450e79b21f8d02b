package main

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
	"github.com/idemkit/idem/internal/demo"
	"github.com/idemkit/idem/server"
)

// The bounds of a -tokens file's fields.
const (
	maxTenantLen = 64
	minTokenLen  = 16
	maxTokenLen  = 512
)

// errUnknownToken is the scope function's error for a bearer token that the
// -tokens file does not list; the middleware and the payments API answer 401.
var errUnknownToken = errors.New("idem-server: unknown bearer token")

// errAnonymous is the scope function's error for a request without
// credentials under -anonymous=false.
var errAnonymous = errors.New("idem-server: no credentials, and -anonymous=false")

// scopeFunc returns how a request's scope is found, the one function both
// modes (the demo and the gateway) key their records and payments by:
//
//   - with -tokens FILE, a request whose bearer token the file lists is its
//     tenant's ("tenant:NAME"); an unknown token, another Authorization
//     scheme or several Authorization lines are answered 401. Callers are
//     authenticated, so each tenant's share of the stores holds.
//   - without -tokens, scopes are self-declared: each bearer token (any
//     string) is a scope of its own (server.BearerScope), or, in the gateway
//     mode with -scope-header, each value of that header (gateway.Scope).
//     Nothing stops a caller from sending a new one with every request, so
//     the stores' per-scope shares protect nobody: see docs/server.md.
//
// A request without an Authorization header is in the public scope
// (demo.PublicScope), one scope for all anonymous callers, bounded as any
// other scope, in the demo without -tokens, and wherever -anonymous says so;
// it is answered 401 with -tokens or in the gateway mode (unless -anonymous),
// and wherever -anonymous=false says so.
func scopeFunc(cfg config) (func(*http.Request) (string, error), error) {
	known := server.BearerScope
	if cfg.gateway.enabled() {
		known = gateway.Scope(cfg.gateway.scopeHeader) // -scope-header, or BearerScope
	}
	if cfg.tokensFile != "" {
		ts, err := loadTokens(cfg.tokensFile)
		if err != nil {
			return nil, err
		}
		known = ts.scope
	}
	if !cfg.anonymous {
		return func(r *http.Request) (string, error) {
			if len(r.Header.Values("Authorization")) == 0 {
				return "", errAnonymous
			}
			return known(r)
		}, nil
	}
	return func(r *http.Request) (string, error) {
		if len(r.Header.Values("Authorization")) == 0 {
			return demo.PublicScope, nil
		}
		return known(r)
	}, nil
}

// tokens maps the SHA-256 of each token of a -tokens file to its tenant's
// scope. Tokens are kept hashed, and looked up by hash, so that a lookup's
// time says nothing about how much of a token matched.
type tokens map[[sha256.Size]byte]string

// scope is the scope function of an authenticated server: the tenant of a
// known bearer token; ErrNoCredentials, ErrBadCredentials or errUnknownToken
// otherwise (all answered 401).
func (ts tokens) scope(r *http.Request) (string, error) {
	vs := r.Header.Values("Authorization")
	switch len(vs) {
	case 0:
		return "", server.ErrNoCredentials
	case 1:
	default:
		return "", server.ErrBadCredentials
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vs[0]), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "bearer") || tok == "" {
		return "", server.ErrBadCredentials
	}
	if s, ok := ts[sha256.Sum256([]byte(tok))]; ok {
		return s, nil
	}
	return "", errUnknownToken
}

// loadTokens reads a -tokens file (see parseTokens).
func loadTokens(path string) (tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-tokens: %w", err)
	}
	defer f.Close()
	ts, err := parseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("-tokens %s: %w", path, err)
	}
	return ts, nil
}

// parseTokens reads the -tokens format: one token per line, the tenant's name
// then the token, separated by spaces or tabs; blank lines and lines whose
// first non-blank character is # are ignored. A tenant name is 1 to 64
// letters, digits, '.', '_' or '-'; a token is 16 to 512 visible ASCII
// characters and appears once in the file; a tenant may have several tokens
// (to rotate them), which share its records. A file without a token is an
// error: it would refuse every caller with credentials.
func parseTokens(r io.Reader) (tokens, error) {
	ts := tokens{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want a tenant and a token, separated by spaces, got %d fields", n, len(fields))
		}
		tenant, tok := fields[0], fields[1]
		if !isTenantName(tenant) {
			return nil, fmt.Errorf("line %d: tenant %q: want 1 to %d letters, digits, '.', '_' or '-'", n, tenant, maxTenantLen)
		}
		if len(tok) < minTokenLen || len(tok) > maxTokenLen || !visibleASCII(tok) {
			return nil, fmt.Errorf("line %d: tenant %s's token: want %d to %d visible ASCII characters", n, tenant, minTokenLen, maxTokenLen)
		}
		h := sha256.Sum256([]byte(tok))
		if _, dup := ts[h]; dup {
			return nil, fmt.Errorf("line %d: tenant %s's token is listed twice in the file", n, tenant)
		}
		ts[h] = "tenant:" + tenant
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, errors.New("no token in the file")
	}
	return ts, nil
}

func isTenantName(s string) bool {
	if s == "" || len(s) > maxTenantLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
