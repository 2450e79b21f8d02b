package demo

import (
	"net/http"

	"github.com/idemkit/idem/internal/demo/health"
	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// Handler returns the demo payments server that cmd/idem-server and
// server/idemtest both serve:
//
//	POST /payments              create a payment, protected by server.Middleware(store),
//	                            scoped by the bearer token (server.BearerScope); a caller
//	                            without one is in the demo's public scope (see Scope)
//	GET  /payments?customer=C   the caller's payments of C (all of the caller's when C is
//	                            empty), a page at a time (payments.API.List): a token
//	                            holder's own, or, without a token, the public scope's;
//	                            never another token's
//	POST /payments/unprotected  create a payment with no idempotency: retries double-charge
//	GET  /livez, /healthz       liveness: 200 "ok" while the process serves
//	GET  /readyz                readiness: 200 "ready" when the store answers its Ping
//	                            (server.Pinger; a store without Ping is ready), else 503
//
// Both POST routes go through inj (nil: no faults); GET routes never do, so
// that tests can always count what happened. mwOpts come after the scope
// option and may replace it. It is New with Scope as the scope function.
func Handler(store server.Store, ledger payments.Ledger, inj *chaos.Injector, mwOpts ...server.Option) http.Handler {
	return New(Config{Store: store, Ledger: ledger, Faults: inj, Options: mwOpts})
}

// Config is what New serves. Store and Ledger are required.
type Config struct {
	Store  server.Store
	Ledger payments.Ledger
	// Faults injects faults into both POST routes; nil: none.
	Faults *chaos.Injector
	// Scope finds a caller's scope: the middleware keys records by it and the
	// payments API files each payment under it (an error answers 401 on
	// every payments route). nil: Scope.
	Scope func(*http.Request) (string, error)
	// Options are the middleware's other options, after server.WithScope.
	Options []server.Option
}

// New returns the demo payments server of Handler for cfg.
func New(cfg Config) http.Handler {
	scope := cfg.Scope
	if scope == nil {
		scope = Scope
	}
	api := &payments.API{Ledger: cfg.Ledger, Owner: scope}
	wrap := func(h http.Handler) http.Handler { return h }
	if inj := cfg.Faults; inj != nil {
		api.BeforeWrite = inj.BeforeWrite
		api.AfterWrite = inj.AfterWrite
		wrap = inj.Wrap
	}
	opts := append([]server.Option{server.WithScope(scope)}, cfg.Options...)
	create := http.HandlerFunc(api.Create)

	mux := http.NewServeMux()
	mux.Handle("POST /payments", wrap(server.Middleware(cfg.Store, opts...)(create)))
	mux.Handle("POST /payments/unprotected", wrap(create))
	mux.HandleFunc("GET /payments", api.List)
	mux.HandleFunc("GET /livez", health.Live)
	mux.HandleFunc("GET /healthz", health.Live)
	mux.HandleFunc("GET /readyz", health.Ready(cfg.Store))
	return mux
}

// PublicScope is the scope of demo callers without credentials.
const PublicScope = "demo-public"

// Scope is the demo's scope function: server.BearerScope, except that a
// caller without an Authorization header is put in PublicScope rather than
// refused, so that curl and the examples work without a token. Callers in it
// share records (the same key and body replays another public caller's
// payment) and see each other's payments in GET /payments, and only those: a
// token holder's payments are listed to that token alone. A real service
// refuses callers without credentials, as server.BearerScope does.
func Scope(r *http.Request) (string, error) {
	if len(r.Header.Values("Authorization")) == 0 {
		return PublicScope, nil
	}
	return server.BearerScope(r)
}
