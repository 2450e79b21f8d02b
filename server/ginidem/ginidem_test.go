package ginidem_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/ginidem"
	"github.com/idemkit/idem/server/memstore"
)

func serve(t *testing.T, r *gin.Engine) *httptest.Server {
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

// An error-handling middleware registered after ginidem answers inside it:
// its answer is recorded or released by its status.
func TestInnerErrorMiddlewareIsRecordedByStatus(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.Use(ginidem.Middleware(memstore.New()), errorsAsJSON)
	r.POST("/fail", func(c *gin.Context) { runs.Add(1); _ = c.Error(errors.New("boom")) })
	r.POST("/gone", func(c *gin.Context) { runs.Add(1); _ = c.AbortWithError(http.StatusConflict, errors.New("taken")) })
	srv := serve(t, r)
	for range 2 {
		if a := adaptertest.Post(t, srv, "/fail", "k1"); a.Status != 500 || a.Replayed {
			t.Fatalf("/fail: %+v, want the error middleware's 500, not replayed", a)
		}
	}
	first := adaptertest.Post(t, srv, "/gone", "k2")
	if again := adaptertest.Post(t, srv, "/gone", "k2"); first.Status != 409 || again != (adaptertest.Answer{Status: 409, Body: first.Body, Replayed: true}) {
		t.Fatalf("/gone: %+v then %+v, want the 409 recorded and replayed", first, again)
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("handlers ran %d times, want 3 (the 500 twice, the 409 once)", n)
	}
}

// c.Status without a body is the answer: gin writes the header when the
// chain ends, and so does the middleware, before recording it.
func TestStatusWithoutBodyIsRecorded(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.POST("/accept", ginidem.Middleware(memstore.New()), func(c *gin.Context) { runs.Add(1); c.Status(http.StatusAccepted) })
	srv := serve(t, r)
	if a := adaptertest.Post(t, srv, "/accept", "k1"); a != (adaptertest.Answer{Status: 202, Body: "", Replayed: false}) {
		t.Fatalf("first %+v, want 202", a)
	}
	if a := adaptertest.Post(t, srv, "/accept", "k1"); a != (adaptertest.Answer{Status: 202, Body: "", Replayed: true}) {
		t.Fatalf("retry %+v, want 202 replayed", a)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times", n)
	}
}

// A middleware in front of ginidem sees the status and size actually sent,
// for a first execution, a replay and a refusal alike, and the chain after
// ginidem does not run again.
func TestOuterMiddlewareSeesTheAnswer(t *testing.T) {
	var seen []string
	var after atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		seen = append(seen, http.StatusText(c.Writer.Status())+" written="+map[bool]string{true: "yes", false: "no"}[c.Writer.Written()])
	})
	r.Use(ginidem.Middleware(memstore.New()), func(c *gin.Context) { after.Add(1) })
	r.POST("/x", func(c *gin.Context) { c.String(http.StatusCreated, "made") })
	srv := serve(t, r)
	adaptertest.Post(t, srv, "/x", "k1")
	adaptertest.Post(t, srv, "/x", "k1")
	adaptertest.Post(t, srv, "/x", "")
	want := []string{"Created written=yes", "Created written=yes", "Bad Request written=yes"}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("outer middleware saw %q, want %q", seen, want)
	}
	if n := after.Load(); n != 1 {
		t.Errorf("the middleware after ginidem ran %d times, want 1", n)
	}
}

// A hijack (a websocket upgrade) is refused: it cannot be recorded.
func TestHijackIsRefused(t *testing.T) {
	var hijackErr error
	r := gin.New()
	r.POST("/ws", ginidem.Middleware(memstore.New()), func(c *gin.Context) {
		_, _, hijackErr = c.Writer.Hijack()
	})
	srv := serve(t, r)
	if a := adaptertest.Post(t, srv, "/ws", "k1"); a.Status != 500 || !strings.Contains(a.Body, server.ProblemUnprotectable) {
		t.Errorf("answer %+v, want 500 unprotectable", a)
	}
	if !errors.Is(hijackErr, server.ErrUnprotectable) {
		t.Errorf("Hijack: %v, want ErrUnprotectable", hijackErr)
	}
}

// Unprotected methods pass through untouched, an outer error middleware's
// answer included, and DeclareEffect says so.
func TestUnprotectedMethodPassesThrough(t *testing.T) {
	declared := true
	r := gin.New()
	r.Use(errorsAsJSON, ginidem.Middleware(memstore.New()))
	r.GET("/x", func(c *gin.Context) {
		declared = ginidem.DeclareEffect(c)
		c.String(http.StatusOK, "ok")
	})
	r.GET("/fail", func(c *gin.Context) { _ = c.Error(errors.New("boom")) })
	srv := serve(t, r)
	for _, c := range []struct {
		path   string
		status int
	}{{"/x", 200}, {"/fail", 500}} {
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
}

func TestMiddlewarePanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"nil store", func() { ginidem.Middleware(nil) }, "ginidem: Middleware(nil): want a server.Store"},
		{"nil option", func() { ginidem.Middleware(memstore.New(), server.WithTTL(time.Hour), nil) }, "ginidem: Middleware(nil Option): want a server.Option"},
		{"bad option", func() { ginidem.Middleware(memstore.New(), server.WithTTL(0)) }, "server: WithTTL(0s): want a positive duration"},
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
