package adaptertest

import (
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
		mux.Handle("POST /ops/{op}", Recover(server.Middleware(store, opts...)(
			Handler(l, func(r *http.Request) string { return r.PathValue("op") }))))
		return mux
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
