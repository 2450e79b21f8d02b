package demo

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

func do(t *testing.T, h http.Handler, method, target, bearer, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	if key != "" {
		r.Header.Set(server.HeaderKey, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestListIsScopedToTheCaller: GET /payments lists the caller's payments only:
// a token's own, or, without a token, the public scope's (issue 12: it listed
// every customer's payments without authentication).
func TestListIsScopedToTheCaller(t *testing.T) {
	t.Parallel()
	h := Handler(memstore.New(), payments.NewMemLedger(), nil)
	const body = `{"customer":"cus_1","amount":100,"currency":"EUR"}`
	for _, who := range []struct{ bearer, key string }{{"tok-a", "a1"}, {"tok-a", "a2"}, {"tok-b", "b1"}, {"", "anon-1"}} {
		if rec := do(t, h, "POST", "/payments", who.bearer, who.key, body); rec.Code != http.StatusCreated {
			t.Fatalf("POST as %q: %d %s", who.bearer, rec.Code, rec.Body)
		}
	}
	count := func(bearer string) int {
		rec := do(t, h, "GET", "/payments?customer=cus_1", bearer, "", "")
		var l payments.ListResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &l) != nil {
			t.Fatalf("GET as %q: %d %s", bearer, rec.Code, rec.Body)
		}
		return l.Count
	}
	if a, b, c, anon := count("tok-a"), count("tok-b"), count("tok-c"), count(""); a != 2 || b != 1 || c != 0 || anon != 1 {
		t.Errorf("tok-a sees %d, tok-b %d, tok-c %d, no token %d; want 2, 1, 0, 1", a, b, c, anon)
	}
	r := httptest.NewRequest("GET", "/payments", nil)
	r.Header.Set("Authorization", "Bearer")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusUnauthorized || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET with an unusable Authorization: %d %s, want a 401 problem", rec.Code, rec.Body)
	}
}

// TestPublicScopeIsApart: callers without a token share the demo's public
// scope, never a token holder's records.
func TestPublicScopeIsApart(t *testing.T) {
	t.Parallel()
	h := Handler(memstore.New(), payments.NewMemLedger(), nil)
	const body = `{"customer":"cus_1","amount":100,"currency":"EUR"}`
	a := do(t, h, "POST", "/payments", "tok-a", "k", body)
	anon := do(t, h, "POST", "/payments", "", "k", body)
	if a.Code != 201 || anon.Code != 201 || anon.Header().Get(server.HeaderReplayed) != "" || a.Body.String() == anon.Body.String() {
		t.Errorf("same key with and without a token: %d %s / %d %s, want two executions", a.Code, a.Body, anon.Code, anon.Body)
	}
}

type pinger struct {
	server.Store
	err error
}

func (p pinger) Ping(context.Context) error { return p.err }

// TestLivenessAndReadiness: /livez and /healthz answer while the process
// serves; /readyz asks the store (issue 12: /healthz said 200 with the store
// down).
func TestLivenessAndReadiness(t *testing.T) {
	t.Parallel()
	down := pinger{Store: memstore.New(), err: errors.New("connection refused")}
	tests := []struct {
		name   string
		store  server.Store
		path   string
		status int
		body   string
	}{
		{"live, store down", down, "/livez", 200, "ok\n"},
		{"healthz is liveness", down, "/healthz", 200, "ok\n"},
		{"not ready, store down", down, "/readyz", 503, "store unavailable\n"},
		{"ready, store up", pinger{Store: memstore.New()}, "/readyz", 200, "ready\n"},
		{"ready, store without Ping", memstore.New(), "/readyz", 200, "ready\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := do(t, Handler(tt.store, payments.NewMemLedger(), nil), "GET", tt.path, "", "", "")
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.status || string(body) != tt.body || rec.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("GET %s = %d %q, want %d %q", tt.path, rec.Code, body, tt.status, tt.body)
			}
		})
	}
}
