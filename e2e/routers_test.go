package e2e

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
)

// chi takes server.Middleware as it is: a func(http.Handler) http.Handler.
func TestChiRouter(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, store server.Store, l *adaptertest.Ledger, opts ...server.Option) http.Handler {
		r := chi.NewRouter()
		r.Use(adaptertest.Recover)
		r.With(server.Middleware(store, opts...)).Post("/ops/{op}",
			adaptertest.Handler(l, func(r *http.Request) string { return chi.URLParam(r, "op") }))
		return r
	})
}

// gorilla/mux takes it as a mux.MiddlewareFunc on a subrouter.
func TestGorillaMuxRouter(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, store server.Store, l *adaptertest.Ledger, opts ...server.Option) http.Handler {
		r := mux.NewRouter()
		r.Use(adaptertest.Recover)
		sub := r.PathPrefix("/ops").Subrouter()
		sub.Use(server.Middleware(store, opts...))
		sub.Handle("/{op}", adaptertest.Handler(l, func(r *http.Request) string { return mux.Vars(r)["op"] })).Methods(http.MethodPost)
		return r
	})
}
