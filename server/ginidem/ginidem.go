package ginidem

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/server"
)

// Middleware returns gin middleware that protects the requests of the
// configured methods (POST and PATCH by default) with an Idempotency-Key,
// recording their responses in store, as server.Middleware does for
// net/http; opts are server's options. It panics when store or an option is
// nil (see the package documentation for the message).
//
// The handlers after it in the chain run at most once per key: a replay, a
// refusal (400, 401, 413, 422), a 409 or a store failure is answered by the
// middleware and aborts the chain. What they write through c.Writer (c.JSON,
// c.String, c.Status, c.AbortWithStatusJSON, ...) is the response, recorded
// or released by its status. Errors they attach with c.Error while writing
// nothing are left to an error-handling middleware registered before this
// one: the key is released (the request failed) and that middleware answers;
// one registered after this one answers inside it, and its answer is
// recorded by its status.
func Middleware(store server.Store, opts ...server.Option) gin.HandlerFunc {
	if store == nil {
		panic("ginidem: Middleware(nil): want a server.Store")
	}
	for _, o := range opts {
		if o == nil {
			panic("ginidem: Middleware(nil Option): want a server.Option")
		}
	}
	g := server.NewGuard(store, opts...)
	return func(c *gin.Context) {
		outer, req := c.Writer, c.Request
		// commit: the middleware answered (a replay, a refusal) or captured
		// the chain's answer, which is final: its header is written now, as
		// gin does when a chain ends, so no layer in front changes it.
		ran, commit := false, true
		defer func() { c.Writer, c.Request = outer, req }()
		g.Serve(outer, req, func(w http.ResponseWriter, r *http.Request) bool {
			ran = true
			if r == req { // a method not protected: as without idem
				commit = false
				c.Next()
				return true
			}
			gw := newWriter(w, outer)
			c.Writer, c.Request = gw, r
			c.Next()
			if !gw.Written() && len(c.Errors) > 0 {
				commit = false // an outer error handler answers
				return false
			}
			gw.WriteHeaderNow() // what gin itself does when the chain ends
			return true
		})
		if commit {
			outer.WriteHeaderNow()
		}
		if !ran { // answered by the middleware: no handler after it may run
			c.Abort()
		}
	}
}

// DeclareEffect tells the middleware that the request's effect has happened
// and cannot be undone, so that its answer, a 5xx included, is recorded (see
// server.DeclareEffect). It reports whether c's request is protected.
func DeclareEffect(c *gin.Context) bool {
	return server.DeclareEffect(c.Request.Context())
}
