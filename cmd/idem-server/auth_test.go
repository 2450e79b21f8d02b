package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/demo"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
)

const (
	tokenAcme   = "acme-0123456789abcdef"
	tokenAcme2  = "acme-rotated-0123456789"
	tokenGlobex = "globex-0123456789abcdef"
)

// writeTokens writes a -tokens file and returns its path.
func writeTokens(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	ts, err := parseTokens(strings.NewReader("# tenants\n\nacme " + tokenAcme + "\n  acme\t" + tokenAcme2 +
		"  \n# globex\nglobex " + tokenGlobex + "\n"))
	if err != nil || len(ts) != 3 {
		t.Fatalf("parseTokens = %d tokens, %v; want 3", len(ts), err)
	}
	for _, bad := range []struct{ text, want string }{
		{"", "no token in the file"},
		{"# only a comment\n", "no token in the file"},
		{"acme\n", "line 1: want a tenant and a token"},
		{"acme " + tokenAcme + " extra\n", "line 1: want a tenant and a token"},
		{"ac/me " + tokenAcme + "\n", `line 1: tenant "ac/me"`},
		{strings.Repeat("a", 65) + " " + tokenAcme + "\n", "line 1: tenant"},
		{"acme short\n", "line 1: tenant acme's token: want 16 to 512"},
		{"acme " + strings.Repeat("x", 513) + "\n", "want 16 to 512"},
		{"acme " + tokenAcme + "\nglobex " + tokenAcme + "\n", "line 2: tenant globex's token is listed twice"},
	} {
		if _, err := parseTokens(strings.NewReader(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseTokens(%q) = %v, want an error with %q", bad.text, err, bad.want)
		}
	}
}

// TestScopeFunc: with -tokens a known token is its tenant's scope (two
// tokens of one tenant share it) and anything else with credentials is
// refused; without, every token is a scope of its own; either way a caller
// without credentials is in the public scope, or refused with -anonymous=false.
func TestScopeFunc(t *testing.T) {
	t.Parallel()
	path := writeTokens(t, "acme "+tokenAcme+"\nacme "+tokenAcme2+"\nglobex "+tokenGlobex+"\n")
	scopeOf := func(f func(*http.Request) (string, error), auth ...string) (string, error) {
		r := httptest.NewRequest(http.MethodPost, "/payments", nil)
		for _, a := range auth {
			r.Header.Add("Authorization", a)
		}
		return f(r)
	}
	authed, err := scopeFunc(config{tokensFile: path, anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		auth  []string
		scope string
		err   error
	}{
		{[]string{"Bearer " + tokenAcme}, "tenant:acme", nil},
		{[]string{"bearer  " + tokenAcme2 + " "}, "tenant:acme", nil},
		{[]string{"Bearer " + tokenGlobex}, "tenant:globex", nil},
		{nil, demo.PublicScope, nil},
		{[]string{"Bearer not-a-known-token-at-all"}, "", errUnknownToken},
		{[]string{"Basic " + tokenAcme}, "", server.ErrBadCredentials},
		{[]string{"Bearer"}, "", server.ErrBadCredentials},
		{[]string{"Bearer " + tokenAcme, "Bearer " + tokenGlobex}, "", server.ErrBadCredentials},
	} {
		if s, err := scopeOf(authed, c.auth...); s != c.scope || !errors.Is(err, c.err) {
			t.Errorf("-tokens, Authorization %q: %q, %v; want %q, %v", c.auth, s, err, c.scope, c.err)
		}
	}

	open, err := scopeFunc(config{anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := scopeOf(open, "Bearer one")
	b, _ := scopeOf(open, "Bearer two")
	if a == b || !strings.HasPrefix(a, "bearer:") {
		t.Errorf("without -tokens, two tokens' scopes %q and %q: want two bearer: scopes", a, b)
	}
	if s, err := scopeOf(open); s != demo.PublicScope || err != nil {
		t.Errorf("without -tokens, no credentials: %q, %v; want the public scope", s, err)
	}

	strict, err := scopeFunc(config{tokensFile: path, anonymous: false})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scopeOf(strict); !errors.Is(err, errAnonymous) {
		t.Errorf("-anonymous=false, no credentials: %v, want errAnonymous", err)
	}
	if s, err := scopeOf(strict, "Bearer "+tokenAcme); s != "tenant:acme" || err != nil {
		t.Errorf("-anonymous=false, a known token: %q, %v", s, err)
	}

	if _, err := scopeFunc(config{tokensFile: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "-tokens") {
		t.Errorf("a missing -tokens file: %v, want an error naming -tokens", err)
	}
}

// TestGatewayTokens: the gateway mode scopes by the same function as the demo:
// with -tokens, an unknown token (or none) is answered 401 before the store or
// the upstream sees it, a known one is forwarded once and replayed under its
// tenant's scope, and two tokens of one tenant share its keys.
func TestGatewayTokens(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t, nil)
	c, err := parseFlags([]string{"-upstream", up.URL, "-tokens", writeTokens(t, "acme "+tokenAcme+"\nacme "+tokenAcme2+"\n")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	scope, err := scopeFunc(c)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := newTelemetry(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newGateway(c.gateway, memstore.New(), chaos.New(chaos.WithHeaders(false)), false, scope,
		middlewareOptions(c, tel, scope, newLimits(c))...))
	defer srv.Close()
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	for _, h := range []http.Header{bearer("unknown-token-0123456789"), {}} {
		if a := send(t, "POST", srv.URL+"/orders", "op-x", "k1", `{}`, h); a.Status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d %s, want 401", h.Get("Authorization"), a.Status, a.Body)
		}
	}
	if up.count("op-x") != 0 {
		t.Errorf("the upstream saw %d refused requests, want none", up.count("op-x"))
	}
	first := send(t, "POST", srv.URL+"/orders", "op-a", "k1", `{}`, bearer(tokenAcme))
	again := send(t, "POST", srv.URL+"/orders", "op-a", "k1", `{}`, bearer(tokenAcme2))
	if first.Status != http.StatusCreated || !again.replayed() || up.count("op-a") != 1 {
		t.Errorf("a tenant's request and its retry with its other token: %d, replayed=%v, upstream %d times; want 201, a replay, once",
			first.Status, again.replayed(), up.count("op-a"))
	}
	if _, err := parseFlags([]string{"-upstream", up.URL, "-tokens", "f", "-scope-header", "X-Tenant"}, io.Discard); err == nil {
		t.Error("-tokens with -scope-header accepted")
	}
	if _, err := parseFlags([]string{"-upstream", up.URL, "-request-timeout", "10s", "-upstream-timeout", "10s"}, io.Discard); err == nil {
		t.Error("an -upstream-timeout that does not fit in -request-timeout accepted")
	}
}
