package ginidem_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server/ginidem"
	"github.com/idemkit/idem/server/memstore"
)

// gin's body limit is net/http's, http.MaxBytesReader in a middleware in
// front: a body it cuts is answered 413, naming its limit, not ginidem's.
func TestBodyLimitInFrontIs413(t *testing.T) {
	const limit = 1 << 10
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
		c.Next()
	})
	r.POST("/doc", ginidem.Middleware(memstore.New()), func(c *gin.Context) { c.Status(http.StatusCreated) })
	adaptertest.CheckOuterBodyLimit(t, serve(t, r), "/doc", limit)
}
