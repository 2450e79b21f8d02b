package server

import "net/http"

// A Guard runs the middleware's protocol around a handler that a web
// framework runs and whose response the framework produces: the building
// block of a framework adapter (server/ginidem, server/echoidem), for code
// that cannot take the shape of an http.Handler. Middleware is a Guard
// around an http.Handler.
//
// Build one with NewGuard; the zero Guard panics when used.
type Guard struct {
	p *protected
}

// NewGuard returns a Guard that records responses in store, configured as
// Middleware is by opts. It panics when store is nil or an option is
// impossible.
func NewGuard(store Store, opts ...Option) *Guard {
	if store == nil {
		badArg("NewGuard(nil)", "a Store")
	}
	return &Guard{p: &protected{store: store, cfg: newConfig("NewGuard", opts)}}
}

// Serve answers r on w as Middleware's handler would, with run in place of
// the protected handler. Serve calls run at most once, on the caller's
// goroutine: never for a replay, a refusal (400, 401, 413, 422), a 409 or a
// store failure, which Serve answers itself; run's caller must then stop its
// framework's handler chain, so that no handler runs. When it does call run,
// w is the capture writer the framework must write the response to, and r the
// request the handler must see (its body is a fresh reader over the bytes
// received, its context is the store's and carries DeclareEffect's flag); run
// returns once the response is complete.
//
// run returns whether the framework answered the request. false means that
// it left the answer to an outer layer (gin's c.Error with nothing written,
// which an error-handling middleware registered in front of the adapter
// answers): what an outer layer writes after Serve returns is not seen, so it
// cannot be recorded. Serve then treats the request as failed: the key is
// released, as for a 5xx, and Serve writes nothing to w, for the outer layer
// to answer; after DeclareEffect, the key records ProblemOutcomeUnknown and
// Serve sends it. true means that what run wrote to w is the answer, an
// implicit 200 included when it wrote nothing (as net/http sends then).
//
// Requests whose method is not protected go to run directly, with w and r as
// given (so an adapter tells them apart by r being the very request it
// passed: a protected request's r never is), and run's result is ignored.
func (g *Guard) Serve(w http.ResponseWriter, r *http.Request, run func(w http.ResponseWriter, r *http.Request) (answered bool)) {
	if g == nil || g.p == nil {
		badArg("Guard.Serve on a zero Guard", "a Guard made by NewGuard")
	}
	if run == nil {
		badArg("Guard.Serve(w, r, nil)", "a run function")
	}
	if !g.p.cfg.needsKey(r.Method) {
		run(w, r)
		return
	}
	ex := &exchange{p: g.p, w: w, r: r, handler: run}
	ex.serve()
}
