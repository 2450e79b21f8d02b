package echoidem_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/echoidem"
	"github.com/idemkit/idem/server/memstore"
)

func newEcho(t *testing.T) (*echo.Echo, func() *httptest.Server) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	return e, func() *httptest.Server {
		srv := httptest.NewServer(e)
		t.Cleanup(srv.Close)
		return srv
	}
}

// A returned error's answer, written by the Echo's HTTPErrorHandler, is
// recorded by its status: a 409 is the outcome, replayed; a 503 is released.
func TestReturnedErrorIsRecordedByStatus(t *testing.T) {
	var runs atomic.Int32
	e, start := newEcho(t)
	mw := echoidem.Middleware(memstore.New())
	e.POST("/taken", func(c echo.Context) error { runs.Add(1); return echo.NewHTTPError(http.StatusConflict, "taken") }, mw)
	e.POST("/down", func(c echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusServiceUnavailable, "db down")
	}, mw)
	srv := start()
	first := adaptertest.Post(t, srv, "/taken", "k1")
	if again := adaptertest.Post(t, srv, "/taken", "k1"); first.Status != 409 || again != (adaptertest.Answer{Status: 409, Body: first.Body, Replayed: true}) {
		t.Fatalf("/taken: %+v then %+v, want the 409 recorded and replayed", first, again)
	}
	for range 2 {
		if a := adaptertest.Post(t, srv, "/down", "k2"); a.Status != 503 || a.Replayed || !strings.Contains(a.Body, "db down") {
			t.Fatalf("/down: %+v, want the error handler's 503, not replayed", a)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("handlers ran %d times, want 3", n)
	}
}

// A custom HTTPErrorHandler that writes nothing leaves a 500, released:
// never an implicit 200 for a failed request.
func TestErrorHandlerThatWritesNothingIs500(t *testing.T) {
	var handled atomic.Int32
	e, start := newEcho(t)
	e.HTTPErrorHandler = func(err error, c echo.Context) { handled.Add(1) }
	e.POST("/x", func(c echo.Context) error { return errors.New("boom") }, echoidem.Middleware(memstore.New()))
	srv := start()
	for range 2 {
		if a := adaptertest.Post(t, srv, "/x", "k1"); a.Status != 500 || a.Replayed {
			t.Fatalf("answer %+v, want 500, not replayed", a)
		}
	}
	if n := handled.Load(); n != 2 {
		t.Errorf("the error handler ran %d times, want once per request", n)
	}
}

// A middleware in front of echoidem sees the answer actually sent, and the
// handler (with the middlewares after echoidem) runs once.
func TestOuterMiddlewareSeesTheAnswer(t *testing.T) {
	var seen []string
	var runs atomic.Int32
	e, start := newEcho(t)
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			r := c.Response()
			seen = append(seen, http.StatusText(r.Status)+map[bool]string{true: " committed", false: " pending"}[r.Committed])
			return err
		}
	})
	e.POST("/x", func(c echo.Context) error { runs.Add(1); return c.String(http.StatusCreated, "made") }, echoidem.Middleware(memstore.New()))
	srv := start()
	adaptertest.Post(t, srv, "/x", "k1")
	adaptertest.Post(t, srv, "/x", "k1")
	adaptertest.Post(t, srv, "/x", "")
	want := "Created committed,Created committed,Bad Request committed"
	if got := strings.Join(seen, ","); got != want {
		t.Errorf("outer middleware saw %q, want %q", got, want)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// c.NoContent and a handler that writes nothing are answers, recorded.
func TestNoContentIsRecorded(t *testing.T) {
	var runs atomic.Int32
	e, start := newEcho(t)
	mw := echoidem.Middleware(memstore.New())
	e.POST("/nc", func(c echo.Context) error { runs.Add(1); return c.NoContent(http.StatusNoContent) }, mw)
	e.POST("/nothing", func(c echo.Context) error { runs.Add(1); return nil }, mw)
	srv := start()
	for _, c := range []struct {
		path   string
		status int
	}{{"/nc", 204}, {"/nothing", 200}} {
		adaptertest.Post(t, srv, c.path, "k-"+c.path)
		if a := adaptertest.Post(t, srv, c.path, "k-"+c.path); a != (adaptertest.Answer{Status: c.status, Body: "", Replayed: true}) {
			t.Errorf("%s retry: %+v, want %d replayed", c.path, a, c.status)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("handlers ran %d times, want 2", n)
	}
}

func TestUnprotectedMethodPassesThrough(t *testing.T) {
	declared := true
	e, start := newEcho(t)
	e.GET("/x", func(c echo.Context) error {
		declared = echoidem.DeclareEffect(c)
		return c.String(http.StatusOK, "ok")
	}, echoidem.Middleware(memstore.New()))
	var returned error
	recordErr := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { returned = next(c); return returned }
	}
	e.GET("/fail", func(c echo.Context) error { return echo.ErrTeapot }, recordErr, echoidem.Middleware(memstore.New()))
	srv := start()
	for _, c := range []struct {
		path   string
		status int
	}{{"/x", 200}, {"/fail", http.StatusTeapot}} {
		resp, err := srv.Client().Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("GET %s: %d, want %d", c.path, resp.StatusCode, c.status)
		}
	}
	if declared {
		t.Error("DeclareEffect on a GET = true")
	}
	if !errors.Is(returned, echo.ErrTeapot) {
		t.Errorf("a GET's error came back as %v, want it returned as without the middleware", returned)
	}
}

func TestMiddlewarePanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"nil store", func() { echoidem.Middleware(nil) }, "echoidem: Middleware(nil): want a server.Store"},
		{"nil option", func() { echoidem.Middleware(memstore.New(), server.WithTTL(time.Hour), nil) }, "echoidem: Middleware(nil Option): want a server.Option"},
		{"bad option", func() { echoidem.Middleware(memstore.New(), server.WithTTL(0)) }, "server: WithTTL(0s): want a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if r := recover(); r != tt.want {
					t.Errorf("panic %#v, want %q", r, tt.want)
				}
			}()
			tt.f()
		})
	}
}
