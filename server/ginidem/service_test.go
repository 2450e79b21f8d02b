package ginidem_test

import (
	"errors"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/ginidem"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// service is the suite's service written as gin code usually is: recovery
// and an error-handling middleware on the engine, the idempotency
// middleware mw on the group, c.AbortWithStatusJSON for a refusal, c.Error
// for a failure, c.JSON for the answer.
func service(mw gin.HandlerFunc, l *adaptertest.Ledger) *gin.Engine {
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), errorsAsJSON)
	ops := r.Group("/ops", mw)
	ops.POST("/:op", func(c *gin.Context) {
		op := c.Param("op")
		l.Enter(op)
		var in struct {
			Amount int64 `json:"amount"`
		}
		if err := c.ShouldBindJSON(&in); err != nil || in.Amount <= 0 {
			c.AbortWithStatusJSON(http.StatusUnprocessableEntity, gin.H{"error": "amount must be positive"})
			return
		}
		charge, err := l.Charge(op, in.Amount)
		if err != nil {
			_ = c.Error(err)
			return
		}
		ginidem.DeclareEffect(c)
		if err := l.After(op); err != nil {
			c.JSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		c.Header("Location", "/ops/"+op+"/"+charge.ID)
		c.JSON(http.StatusCreated, charge)
	})
	return r
}

// errorsAsJSON answers the errors the handlers attached with c.Error, when
// they wrote nothing: 503 for an unavailable dependency, else 500.
func errorsAsJSON(c *gin.Context) {
	c.Next()
	if len(c.Errors) == 0 || c.Writer.Written() {
		return
	}
	status := http.StatusInternalServerError
	if errors.Is(c.Errors.Last(), adaptertest.ErrUnavailable) {
		status = http.StatusServiceUnavailable
	}
	c.JSON(status, gin.H{"error": c.Errors.Last().Error()})
}

func TestContract(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, store server.Store, l *adaptertest.Ledger, opts ...server.Option) http.Handler {
		return service(ginidem.Middleware(store, opts...), l)
	})
}
