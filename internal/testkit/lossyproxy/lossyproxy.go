// Package lossyproxy is an HTTP proxy for tests that loses answers after the
// upstream acted: it forwards a request, reads the upstream's whole answer,
// and then, when the test says so, cuts the client's connection without a
// byte. The server did the work; the client never hears of it. It is how the
// adapters' suite (internal/testkit/adaptertest) and e2e's gateway tests put a lost
// answer in front of a protected handler.
package lossyproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemkit/idem/server"
)

// Start returns a proxy to upstream (a base URL: the request's path and query
// are appended), closed when the test ends. For each request it counts the
// attempts of its Idempotency-Key (1, 2, ...; requests without a key share
// the key ""), forwards it, with its headers and length, detached from the
// client's cancellation (a network that loses an answer does not stop the
// upstream's work), on a connection of its own, and reads the whole answer.
// When lose(key, attempt) is true it then closes the client's connection
// without writing anything; otherwise it writes the upstream's answer. An
// error reaching the upstream answers 502.
func Start(t testing.TB, upstream string, lose func(key string, attempt int) bool) *httptest.Server {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	var mu sync.Mutex
	attempts := map[string]int{}
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(server.HeaderKey)
		mu.Lock()
		attempts[key]++
		n := attempts[key]
		mu.Unlock()
		out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, upstream+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.ContentLength = r.ContentLength
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if lose(key, n) {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.Close)
	t.Cleanup(tr.CloseIdleConnections)
	return p
}
