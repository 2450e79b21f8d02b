package e2e

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// http.MaxBytesReader in front of server.Middleware: a body it cuts is
// answered 413, naming its limit, whether the body was declared or chunked.
func TestMaxBytesReaderInFrontIs413(t *testing.T) {
	const limit = 1 << 10
	limited := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			next.ServeHTTP(w, r)
		})
	}
	created := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	srv := httptest.NewServer(limited(server.Middleware(memstore.New())(created)))
	t.Cleanup(srv.Close)
	adaptertest.CheckOuterBodyLimit(t, srv, "/doc", limit)
}
