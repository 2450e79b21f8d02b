package echoidem

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/server"
)

// Middleware returns echo middleware that protects the requests of the
// configured methods (POST and PATCH by default) with an Idempotency-Key,
// recording their responses in store, as server.Middleware does for
// net/http; opts are server's options. It panics when store or an option is
// nil (see the package documentation for the message).
//
// The handler after it runs at most once per key: a replay, a refusal (400,
// 401, 413, 422), a 409 or a store failure is answered by the middleware
// and the handler is not called. An error the handler returns is answered
// inside the middleware by the Echo's HTTPErrorHandler (c.Error), so the
// error's response is what is recorded, or released, by its status; the
// middleware then returns nil, the error being answered. A returned error
// whose handler writes nothing is answered 500. Requests of a method that is
// not protected go through as without the middleware, their error returned.
func Middleware(store server.Store, opts ...server.Option) echo.MiddlewareFunc {
	if store == nil {
		panic("echoidem: Middleware(nil): want a server.Store")
	}
	for _, o := range opts {
		if o == nil {
			panic("echoidem: Middleware(nil Option): want a server.Option")
		}
	}
	g := server.NewGuard(store, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (passed error) {
			outer, req := c.Response(), c.Request()
			defer func() { c.SetResponse(outer); c.SetRequest(req) }()
			body := req.Body
			if body != nil && body != http.NoBody {
				req.Body = &limitedBody{ReadCloser: body}
			}
			g.Serve(outer, req, func(w http.ResponseWriter, r *http.Request) bool {
				if r == req { // a method not protected: as without idem
					req.Body = body // echo's own errors, for echo to answer
					passed = next(c)
					return true
				}
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err)
					if !c.Response().Committed {
						_ = c.NoContent(http.StatusInternalServerError)
					}
				}
				return true
			})
			return passed
		}
	}
}

// DeclareEffect tells the middleware that the request's effect has happened
// and cannot be undone, so that its answer, a 5xx or a returned error
// included, is recorded (see server.DeclareEffect). It reports whether c's
// request is protected.
func DeclareEffect(c echo.Context) bool {
	return server.DeclareEffect(c.Request().Context())
}

// limitedBody is the request body the middleware reads: the body as echo
// passes it, with the error of a body limit in front of the middleware
// (BodyLimit's echo.ErrStatusRequestEntityTooLarge, or any *echo.HTTPError
// 413) turned into net/http's *http.MaxBytesError, which the middleware
// answers 413 (ProblemBodyTooLarge) rather than 400 body-unreadable. Its
// Limit is the bytes read when the limit cut the body (BodyLimit's limit).
type limitedBody struct {
	io.ReadCloser
	n int64 // bytes read so far
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if he, ok := errors.AsType[*echo.HTTPError](err); ok && he.Code == http.StatusRequestEntityTooLarge {
		return n, &http.MaxBytesError{Limit: b.n}
	}
	return n, err
}
