package thirdparty

import (
	"fmt"
	"time"

	fiberv3 "github.com/gofiber/fiber/v3"
	idempotencyv3 "github.com/gofiber/fiber/v3/middleware/idempotency"
)

// FiberV3App is FiberApp on Fiber v3 (github.com/gofiber/fiber/v3 and its
// middleware/idempotency), configured the same way: the Idempotency-Key
// header and the key lifetime; everything else is Fiber's default.
func FiberV3App(lifetime time.Duration) *fiberv3.App {
	app := fiberv3.New()
	l := newLedger()
	app.Use(idempotencyv3.New(idempotencyv3.Config{KeyHeader: "Idempotency-Key", Lifetime: lifetime}))
	app.Post("/payments", func(c fiberv3.Ctx) error {
		who, ok := caller(c.Get(fiberv3.HeaderAuthorization))
		if !ok {
			return fiberv3.NewError(fiberv3.StatusUnauthorized, "no bearer token")
		}
		p, err := parsePayment(c.Body())
		if err != nil {
			return fiberv3.NewError(fiberv3.StatusBadRequest, err.Error())
		}
		d, err := slow(c.Get("Slow"))
		if err != nil {
			return fiberv3.NewError(fiberv3.StatusBadRequest, err.Error())
		}
		time.Sleep(d) // the slow handler the in-progress rows need
		if c.Get("Fail") != "" {
			return fiberv3.NewError(fiberv3.StatusInternalServerError, "failed as asked")
		}
		p = l.pay(who, p)
		c.Location("/payments/" + p.ID)
		c.Cookie(&fiberv3.Cookie{Name: "session", Value: fmt.Sprintf("%s-%s", who, p.ID), HTTPOnly: true})
		return c.Status(fiberv3.StatusCreated).JSON(p)
	})
	app.Get("/payments", func(c fiberv3.Ctx) error {
		who, ok := caller(c.Get(fiberv3.HeaderAuthorization))
		if !ok {
			return fiberv3.NewError(fiberv3.StatusUnauthorized, "no bearer token")
		}
		return c.JSON(fiberv3.Map{"count": l.count(who, c.Query("customer"))})
	})
	return app
}
