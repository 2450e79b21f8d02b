package e2e

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"

	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/server"
)

// createOp is the adapter suite's handler in plain net/http, as a chi or
// gorilla/mux service writes it; op reads the route's parameter.
func createOp(l *adaptertest.Ledger, op func(r *http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		op := op(r)
		l.Enter(op)
		var in struct {
			Amount int64 `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 {
			http.Error(w, "amount must be positive", http.StatusUnprocessableEntity)
			return
		}
		c, err := l.Charge(op, in.Amount)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		server.DeclareEffect(r.Context())
		if err := l.After(op); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/ops/"+op+"/"+c.ID)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(c)
	}
}

// chi takes server.Middleware as it is: a func(http.Handler) http.Handler.
func TestChiRouter(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, store server.Store, l *adaptertest.Ledger, opts ...server.Option) http.Handler {
		r := chi.NewRouter()
		r.Use(quietRecoverer)
		r.With(server.Middleware(store, opts...)).Post("/ops/{op}", createOp(l, func(r *http.Request) string { return chi.URLParam(r, "op") }))
		return r
	})
}

// gorilla/mux takes it as a mux.MiddlewareFunc, or around the handler.
func TestGorillaMuxRouter(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, store server.Store, l *adaptertest.Ledger, opts ...server.Option) http.Handler {
		r := mux.NewRouter()
		r.Use(quietRecoverer)
		sub := r.PathPrefix("/ops").Subrouter()
		sub.Use(server.Middleware(store, opts...))
		sub.Handle("/{op}", createOp(l, func(r *http.Request) string { return mux.Vars(r)["op"] })).Methods(http.MethodPost)
		return r
	})
}

// quietRecoverer is chi's Recoverer without its stack trace on stderr.
func quietRecoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

