package ginidem_test

import (
	"net/http"
	"testing"

	"github.com/gin-contrib/gzip"
	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/ginidem"
	"github.com/idemkit/idem/server/memstore"
)

func document(c *gin.Context) {
	c.Header("ETag", adaptertest.DocumentETag)
	c.Data(http.StatusCreated, "application/json", adaptertest.Document)
}

// Regression (issue 27, item 7): gin-contrib/gzip inside ginidem was
// recorded compressed and replayed without its Content-Encoding (gzip bytes
// labelled JSON); with Content-Encoding allow-listed, as the docs advised,
// it was replayed in gzip to a retry that had not asked for it.
func TestCompressionInsideIsReplayedInAnAcceptedEncoding(t *testing.T) {
	for name, opts := range map[string][]server.Option{
		"default_headers":          nil,
		"content_encoding_allowed": {server.WithStoredHeaders("Content-Encoding", "Vary")},
	} {
		t.Run(name, func(t *testing.T) {
			r := gin.New()
			r.POST("/doc", ginidem.Middleware(memstore.New(), opts...), gzip.Gzip(gzip.DefaultCompression), document)
			adaptertest.CheckCompressedReplays(t, serve(t, r), "/doc")
		})
	}
}

// In front of ginidem (the order docs/frameworks.md advises), gzip
// compresses each answer for the request it answers: the record is the
// identity form.
func TestCompressionInFrontCompressesEachAnswer(t *testing.T) {
	r := gin.New()
	r.Use(gzip.Gzip(gzip.DefaultCompression))
	r.POST("/doc", ginidem.Middleware(memstore.New()), document)
	adaptertest.CheckCompressedInFront(t, serve(t, r), "/doc")
}
