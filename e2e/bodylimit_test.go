package e2e

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
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

// chi's middleware.RequestSize (http.MaxBytesReader) in front of a chi route.
func TestChiRequestSizeInFrontIs413(t *testing.T) {
	const limit = 1 << 10
	r := chi.NewRouter()
	r.Use(middleware.RequestSize(limit))
	r.With(server.Middleware(memstore.New())).Post("/doc", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	adaptertest.CheckOuterBodyLimit(t, srv, "/doc", limit)
}
