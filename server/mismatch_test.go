package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// TestKeyReusedWithAnotherBodyIs422 pins the fingerprint comparison for every
// method the middleware protects by default, PATCH as much as POST: over a
// real server, a second request under the same key with another body gets
// 422 key-reused and the handler does not run again (a PATCH whose
// comparison were skipped would get the first update's replay, and the
// second update would be dropped without a word); the first body again gets
// the replay. Both fingerprints, ExactBody and CanonicalJSON.
func TestKeyReusedWithAnotherBodyIs422(t *testing.T) {
	t.Parallel()
	for _, fp := range []struct {
		name string
		fn   server.Fingerprint
	}{{"ExactBody", server.ExactBody}, {"CanonicalJSON", server.CanonicalJSON}} {
		for _, method := range []string{http.MethodPost, http.MethodPatch} {
			t.Run(fp.name+"/"+method, func(t *testing.T) {
				t.Parallel()
				var mu sync.Mutex
				var applied []string // the bodies the handler ran with
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					mu.Lock()
					applied = append(applied, string(b))
					mu.Unlock()
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write(b)
				})
				srv := httptest.NewServer(server.Middleware(memstore.New(), server.WithFingerprint(fp.fn))(h))
				t.Cleanup(srv.Close)
				send := func(body string) (*http.Response, string) {
					t.Helper()
					req, err := http.NewRequest(method, srv.URL+"/orders/1", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set(server.HeaderKey, "order-1-update")
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					return resp, string(b)
				}

				if resp, _ := send(`{"status":"shipped"}`); resp.StatusCode != http.StatusOK {
					t.Fatalf("first %s: %d, want 200", method, resp.StatusCode)
				}
				resp, body := send(`{"status":"cancelled"}`)
				var p server.Problem
				_ = json.Unmarshal([]byte(body), &p)
				if resp.StatusCode != http.StatusUnprocessableEntity || p.Type != server.ProblemMismatch {
					t.Errorf("second %s, same key, another body: %d %s; want 422 %s (the fingerprints were not compared?)",
						method, resp.StatusCode, body, server.ProblemMismatch)
				}
				resp, body = send(`{"status":"shipped"}`)
				if resp.StatusCode != http.StatusOK || resp.Header.Get(server.HeaderReplayed) != "true" || body != `{"status":"shipped"}` {
					t.Errorf("the first body again: %d replayed=%q %s; want the first answer replayed",
						resp.StatusCode, resp.Header.Get(server.HeaderReplayed), body)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(applied) != 1 {
					t.Errorf("the handler ran with %q; want the first body only", applied)
				}
			})
		}
	}
}
