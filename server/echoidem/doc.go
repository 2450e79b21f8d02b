// Package echoidem is idem's server middleware for echo (v4): POST and PATCH
// requests carrying an Idempotency-Key run their handler at most once, and
// every retry gets the recorded response, byte for byte, with
// Idempotent-Replayed: true.
//
//	store := memstore.New()
//	e := echo.New()
//	e.Use(middleware.Recover())
//	e.POST("/payments", createPayment, echoidem.Middleware(store, server.WithScope(server.BearerScope)))
//
//	func createPayment(c echo.Context) error {
//		charge, err := provider.Charge(c.Request().Context(), ...)
//		if err != nil {
//			return echo.NewHTTPError(http.StatusServiceUnavailable, "provider down") // released
//		}
//		echoidem.DeclareEffect(c) // the charge stands: what follows is recorded, a 5xx too
//		return c.JSON(http.StatusCreated, charge)
//	}
//
// The middleware takes server's options and behaves as server.Middleware
// (docs/CONTRACT.md). Use it, not echo.WrapMiddleware(server.Middleware(...)):
// echo answers a returned error after every middleware has returned, so
// through WrapMiddleware the idempotency middleware records what it saw
// then, nothing (an implicit 200), and replays that 200 for an operation
// that failed. echoidem answers the error inside the protocol, with the
// Echo's own HTTPErrorHandler, and records or releases that answer by its
// status: 2xx and most 4xx are recorded, 5xx, 3xx and refusals (400, 401,
// 403, 422, ...) release the key so a retry runs again, unless the handler
// called DeclareEffect first. The middleware returns nil once the error is
// answered, so an HTTPErrorHandler runs once per request.
//
// A panic releases the key and goes on to the recovery middleware
// (middleware.Recover, registered before echoidem). Middlewares registered
// after echoidem on the route or group run inside it, once per key;
// Response().Committed, Status and Size of the context's response, seen by
// middlewares registered before it, are those of the answer actually sent.
// A handler that returns nil and writes nothing has answered 200 (as
// net/http sends), which is recorded. Streaming and hijacking
// (websockets) cannot be recorded: protect only the endpoints that answer
// whole. echo v5 is not supported by this package.
//
// Register middleware.Gzip and middleware.BodyLimit before echoidem: each
// answer is then compressed for its own request, and a body BodyLimit cuts
// is answered 413 (chunked included: echoidem reads echo's error as a body
// over a limit). Gzip after echoidem works too (the record keeps its
// Content-Encoding; a retry that does not accept it gets it decoded), at a
// cost; docs/frameworks.md says which.
//
// Options panic as in every idem package, with a message "<package>:
// <Func>(<value>): want <what is allowed>": an impossible server option when
// it is made ("server: WithTTL(0s): want a positive duration"), Middleware on
// a nil store or option ("echoidem: Middleware(nil): want a server.Store").
package echoidem
