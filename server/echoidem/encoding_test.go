package echoidem_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/echoidem"
	"github.com/idemkit/idem/server/memstore"
)

func document(c echo.Context) error {
	c.Response().Header().Set("ETag", adaptertest.DocumentETag)
	return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, adaptertest.Document)
}

// Regression (issue 27, item 7): echo's Gzip inside echoidem was recorded
// compressed and replayed without its Content-Encoding (gzip bytes labelled
// JSON); with Content-Encoding allow-listed, as the docs advised, it was
// replayed in gzip to a retry that had not asked for it.
func TestCompressionInsideIsReplayedInAnAcceptedEncoding(t *testing.T) {
	for name, opts := range map[string][]server.Option{
		"default_headers":          nil,
		"content_encoding_allowed": {server.WithStoredHeaders("Content-Encoding", "Vary")},
	} {
		t.Run(name, func(t *testing.T) {
			e, start := newEcho(t)
			e.POST("/doc", document, echoidem.Middleware(memstore.New(), opts...), middleware.Gzip())
			adaptertest.CheckCompressedReplays(t, start(), "/doc")
		})
	}
}

// In front of echoidem (the order docs/frameworks.md advises), Gzip
// compresses each answer for the request it answers: the record is the
// identity form.
func TestCompressionInFrontCompressesEachAnswer(t *testing.T) {
	e, start := newEcho(t)
	e.Use(middleware.Gzip())
	e.POST("/doc", document, echoidem.Middleware(memstore.New()))
	adaptertest.CheckCompressedInFront(t, start(), "/doc")
}
