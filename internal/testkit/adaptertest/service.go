package adaptertest

import (
	"encoding/json"
	"net/http"

	"github.com/idemkit/idem/server"
)

// Handler is the suite's service handler in plain net/http (see the package
// documentation), for routers whose handlers are http.Handlers (net/http's
// ServeMux, chi, gorilla/mux) behind server.Middleware; op reads the
// route's :op parameter.
func Handler(l *Ledger, op func(r *http.Request) string) http.HandlerFunc {
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

// Recover answers a panic 500, as the routers' recovery middlewares do,
// without printing its stack.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
