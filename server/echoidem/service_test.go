package echoidem_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/echoidem"
)

// service is the suite's service written as echo code usually is:
// middleware.Recover on the Echo, the idempotency middleware mw on the
// route, returned *echo.HTTPError for a refusal or a failure, c.JSON for
// the answer.
func service(mw echo.MiddlewareFunc, l *adaptertest.Ledger) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
	e.POST("/ops/:op", func(c echo.Context) error {
		op := c.Param("op")
		l.Enter(op)
		var in struct {
			Amount int64 `json:"amount"`
		}
		if err := c.Bind(&in); err != nil || in.Amount <= 0 {
			return echo.NewHTTPError(http.StatusUnprocessableEntity, "amount must be positive")
		}
		charge, err := l.Charge(op, in.Amount)
		if errors.Is(err, adaptertest.ErrUnavailable) {
			return echo.NewHTTPError(http.StatusServiceUnavailable, "ledger down").SetInternal(err)
		}
		if err != nil {
			return err
		}
		echoidem.DeclareEffect(c)
		if err := l.After(op); err != nil {
			return err // the default HTTPErrorHandler answers 500
		}
		c.Response().Header().Set("Location", "/ops/"+op+"/"+charge.ID)
		return c.JSON(http.StatusCreated, charge)
	}, mw)
	return e
}

func TestContract(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, store server.Store, l *adaptertest.Ledger, opts ...server.Option) http.Handler {
		return service(echoidem.Middleware(store, opts...), l)
	})
}
