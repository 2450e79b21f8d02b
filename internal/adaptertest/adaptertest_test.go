package adaptertest

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/server"
)

// The suite passes on plain net/http behind server.Middleware: the service
// its scenarios expect, written without a framework.
func TestRunPassesOnNetHTTP(t *testing.T) {
	Run(t, func(t *testing.T, store server.Store, l *Ledger, opts ...server.Option) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /ops/{op}", recoverer(server.Middleware(store, opts...)(http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) {
				op := r.PathValue("op")
				l.Enter(op)
				var in struct{ Amount int64 }
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
			}))))
		return mux
	})
}

// recoverer answers a panic 500, as the frameworks' recovery middlewares do.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func TestLedgerArming(t *testing.T) {
	l := NewLedger()
	l.armFail("a", 1)
	if _, err := l.Charge("a", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("armed charge: %v, want ErrUnavailable", err)
	}
	if _, err := l.Charge("a", 1); err != nil {
		t.Fatal(err)
	}
	l.armPanic("a", 1)
	func() {
		defer func() {
			if v := recover(); v == nil || !strings.Contains(v.(string), "panic before the charge") {
				t.Errorf("panic %v", v)
			}
		}()
		_, _ = l.Charge("a", 1)
	}()
	if n := len(l.Charges("a")); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}
