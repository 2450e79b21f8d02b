package echoidem_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server/echoidem"
	"github.com/idemkit/idem/server/memstore"
)

// Regression (issue 27, item 7): echo's BodyLimit in front of echoidem cut a
// chunked body with its own error, which echoidem answered 400
// body-unreadable ("send it again"); it is a 413.
func TestBodyLimitInFrontIs413(t *testing.T) {
	const limit = 1 << 10
	e, start := newEcho(t)
	e.Use(middleware.BodyLimit("1KiB"))
	e.POST("/doc", func(c echo.Context) error { return c.NoContent(http.StatusCreated) }, echoidem.Middleware(memstore.New()))
	adaptertest.CheckOuterBodyLimit(t, start(), "/doc", limit)
}

// A handler of a method echoidem does not protect still gets echo's own
// error from a body BodyLimit cut, which echo answers 413.
func TestBodyLimitOnUnprotectedMethodKeepsEchosError(t *testing.T) {
	e, start := newEcho(t)
	e.Use(middleware.BodyLimit("1KiB"))
	e.PUT("/doc", func(c echo.Context) error {
		if _, err := io.ReadAll(c.Request().Body); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}, echoidem.Middleware(memstore.New()))
	srv := start()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/doc", io.MultiReader(strings.NewReader(strings.Repeat("x", 2<<10))))
	req.ContentLength = -1
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT over the limit: %d, want echo's 413", resp.StatusCode)
	}
}
