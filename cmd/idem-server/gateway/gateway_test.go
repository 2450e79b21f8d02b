package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// The gateway's list of refusals (an upstream that answers one did nothing:
// released) is the middleware's: for every 4xx a handler answers, the
// middleware records it exactly when the gateway does not call it a refusal.
func TestGatewayRefusalsAreTheMiddlewares(t *testing.T) {
	t.Parallel()
	for status := 400; status < 500; status++ {
		h := server.Middleware(memstore.New())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
		}))
		var replayed bool
		for range 2 {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
			req.Header.Set(server.HeaderKey, "k")
			h.ServeHTTP(rec, req)
			replayed = rec.Header().Get(server.HeaderReplayed) == "true"
		}
		if replayed == refusals[status] {
			t.Errorf("%d: the middleware replays it: %v; the gateway calls it a refusal: %v", status, replayed, refusals[status])
		}
	}
}
