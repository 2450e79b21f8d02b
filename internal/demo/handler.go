package demo

import (
	"net/http"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// Handler returns the demo payments server that cmd/idem-server and
// server/idemtest both serve:
//
//	POST /payments              create a payment, protected by server.Middleware(store)
//	                            with the scope taken from the bearer token (server.BearerScope)
//	GET  /payments?customer=C   list the payments of C (all when C is empty)
//	POST /payments/unprotected  create a payment with no idempotency: retries double-charge
//	GET  /healthz               200 "ok"
//
// Both POST routes go through inj (nil: no faults); GET routes never do, so
// that tests can always count what happened. mwOpts come after the scope
// option and may replace it.
func Handler(store server.Store, ledger payments.Ledger, inj *chaos.Injector, mwOpts ...server.Option) http.Handler {
	api := &payments.API{Ledger: ledger}
	wrap := func(h http.Handler) http.Handler { return h }
	if inj != nil {
		api.BeforeWrite = inj.BeforeWrite
		api.AfterWrite = inj.AfterWrite
		wrap = inj.Wrap
	}
	opts := append([]server.Option{server.WithScope(server.BearerScope)}, mwOpts...)
	create := http.HandlerFunc(api.Create)

	mux := http.NewServeMux()
	mux.Handle("POST /payments", wrap(server.Middleware(store, opts...)(create)))
	mux.Handle("POST /payments/unprotected", wrap(create))
	mux.HandleFunc("GET /payments", api.List)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
