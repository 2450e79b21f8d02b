package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestRedirectDropsKeyAcrossOrigins: a redirect to another origin (here
// another port) gets neither the caller's Idempotency-Key header nor the
// context's key, as net/http drops Authorization; a redirect within the
// origin keeps the key.
func TestRedirectDropsKeyAcrossOrigins(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]string{} // path -> keys received
	record := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Host+r.URL.Path] = append(seen[r.Host+r.URL.Path], r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}
	other := httptest.NewServer(http.HandlerFunc(record))
	defer other.Close()
	var first *httptest.Server
	first = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/landed", http.StatusTemporaryRedirect)
		case "/home":
			http.Redirect(w, r, first.URL+"/landed", http.StatusTemporaryRedirect)
		default:
			record(w, r)
		}
	}))
	defer first.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

	for _, tc := range []struct {
		name, method, path string
		header, ctx        string // the caller's key, on the header or in the context
		wantAt             string // where the request lands
		wantKey            func(string) bool
		what               string
	}{
		{"GET, context key, other origin", http.MethodGet, "/away", "", "ctx-key", host(other) + "/landed",
			func(k string) bool { return k == "" }, "no key"},
		{"PUT, header key, other origin", http.MethodPut, "/away", "hdr-key", "", host(other) + "/landed",
			func(k string) bool { return k == "" }, "no key"},
		{"POST, header key, other origin", http.MethodPost, "/away", "hdr-key", "", host(other) + "/landed",
			func(k string) bool { return k != "" && k != "hdr-key" }, "a key of its own, not the caller's"},
		{"GET, context key, same origin", http.MethodGet, "/home", "", "ctx-key", host(first) + "/landed",
			func(k string) bool { return k == "ctx-key" }, "the caller's key"},
		{"PUT, header key, same origin", http.MethodPut, "/home", "hdr-key", "", host(first) + "/landed",
			func(k string) bool { return k == "hdr-key" }, "the caller's key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(seen)
			mu.Unlock()
			ctx := context.Background()
			if tc.ctx != "" {
				ctx = ContextWithKey(ctx, tc.ctx)
			}
			req := mustRequest(t, ctx, tc.method, first.URL+tc.path, "{}")
			if tc.header != "" {
				req.Header.Set("Idempotency-Key", tc.header)
			}
			resp, err := NewClient(noWait()).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("status %d, want 201 from the redirect's target", resp.StatusCode)
			}
			mu.Lock()
			keys := seen[tc.wantAt]
			mu.Unlock()
			if len(keys) != 1 || !tc.wantKey(keys[0]) {
				t.Errorf("%s received keys %q, want one request with %s", tc.wantAt, keys, tc.what)
			}
			if tc.header != "" && req.Header.Get("Idempotency-Key") != tc.header {
				t.Error("the caller's request was changed")
			}
		})
	}
}

// TestCrossOrigin pins what another origin is: scheme, host and port, with
// the scheme's default port written or not.
func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	hop := func(from, to string) *http.Request {
		first, _ := http.NewRequest(http.MethodGet, from, nil)
		next, _ := http.NewRequest(http.MethodGet, to, nil)
		next.Response = &http.Response{Request: first}
		return next
	}
	for _, tc := range []struct {
		from, to string
		cross    bool
	}{
		{"http://a.example/x", "http://a.example/y", false},
		{"http://a.example/x", "http://a.example:80/y", false},
		{"https://a.example/x", "https://A.EXAMPLE:443/y", false},
		{"http://a.example/x", "https://a.example/y", true},
		{"http://a.example/x", "http://b.example/y", true},
		{"http://a.example/x", "http://a.example:8080/y", true},
		{"http://[::1]/x", "http://[::1]:80/y", false},
	} {
		if got := crossOrigin(hop(tc.from, tc.to)); got != tc.cross {
			t.Errorf("%s -> %s: cross-origin %v, want %v", tc.from, tc.to, got, tc.cross)
		}
	}
	if first, _ := http.NewRequest(http.MethodGet, "http://a.example/", nil); crossOrigin(first) {
		t.Error("a request that is no redirect hop counted as cross-origin")
	}
}
