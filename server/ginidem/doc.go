// Package ginidem is idem's server middleware for gin: POST and PATCH
// requests carrying an Idempotency-Key run their handler at most once, and
// every retry gets the recorded response, byte for byte, with
// Idempotent-Replayed: true.
//
//	store := memstore.New()
//	r := gin.New()
//	r.Use(gin.Recovery(), errorsAsJSON()) // in front of idem
//	pay := r.Group("/payments", ginidem.Middleware(store, server.WithScope(server.BearerScope)))
//	pay.POST("", func(c *gin.Context) {
//		charge, err := provider.Charge(c, ...)
//		if err != nil {
//			_ = c.Error(err) // nothing written: errorsAsJSON answers; the key is released
//			return
//		}
//		ginidem.DeclareEffect(c) // the charge stands: what follows is recorded, a 5xx too
//		c.JSON(http.StatusCreated, charge)
//	})
//
// The middleware takes server's options and behaves as server.Middleware
// (docs/CONTRACT.md): the handler's response is captured through a
// gin.ResponseWriter of its own, recorded, then sent; a replay, a refusal or
// a 409 aborts the chain, so no handler after the middleware runs. A
// response is recorded or released by its status: 2xx and most 4xx are
// recorded, 5xx, 3xx and refusals (400, 401, 403, 422, ...) release the key
// so a retry runs again, unless the handler called DeclareEffect first.
//
// Where the error path ends decides what is recorded:
//
//   - c.JSON, c.AbortWithStatusJSON, c.AbortWithError, c.Status: the
//     status and body written are the answer;
//   - c.Error with nothing written, answered by an error-handling
//     middleware registered before ginidem (r.Use(errs) then a group with
//     ginidem): the key is released and that middleware's answer goes to
//     the client unrecorded; registered after ginidem, its answer is
//     captured and recorded by its status like any other;
//   - a panic: the key is released and the panic goes on to gin.Recovery
//     (register it before ginidem);
//   - nothing written and no error: gin's implicit 200 (or the status set
//     with c.Status), recorded, as in net/http.
//
// Streaming (c.Stream, SSE) and hijacking (websockets) cannot be recorded:
// protect only the endpoints that answer whole.
//
// Register compression (gin-contrib/gzip) and a body limit (a middleware that
// sets c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, n))
// before ginidem: each answer is then compressed for its own request, and a
// body the limit cuts is answered 413. Compression after ginidem works too
// (the record keeps its Content-Encoding; a retry that does not accept it
// gets it decoded), at a cost; docs/frameworks.md says which.
//
// Options panic as in every idem package, with a message "<package>:
// <Func>(<value>): want <what is allowed>": an impossible server option when
// it is made ("server: WithTTL(0s): want a positive duration"), Middleware on
// a nil store or option ("ginidem: Middleware(nil): want a server.Store").
package ginidem
