// Package thirdparty runs idem-check against idempotency layers idem did
// not write: Go Fiber v2's and v3's middleware
// (github.com/gofiber/fiber/v2/middleware/idempotency, .../v3/...) and, in
// the tests, the npm package express-idempotency, each around the same tiny
// payments handler (ledger.go). It is a module of its own so that no library
// module of idem ever depends on Fiber; its test renders the verdicts into
// cmd/idem-check/README.md and, in CI, checks that the committed tables
// still match a fresh run.
package thirdparty

import (
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
)

// FiberApp returns a Fiber v2 app with the payments handler behind Fiber's
// idempotency middleware, configured only where the draft names a value:
// the Idempotency-Key header (Fiber's default is X-Idempotency-Key) and the
// key lifetime; everything else is Fiber's default (36-character keys, all
// response headers kept, an in-memory store and lock).
func FiberApp(lifetime time.Duration) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	l := newLedger()
	app.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Lifetime: lifetime}))
	app.Post("/payments", func(c *fiber.Ctx) error {
		who, ok := caller(c.Get(fiber.HeaderAuthorization))
		if !ok {
			return fiber.NewError(fiber.StatusUnauthorized, "no bearer token")
		}
		p, err := parsePayment(c.Body())
		if err != nil {
			return fiber.NewError(fiber.StatusBadRequest, err.Error())
		}
		d, err := slow(c.Get("Slow"))
		if err != nil {
			return fiber.NewError(fiber.StatusBadRequest, err.Error())
		}
		time.Sleep(d) // the slow handler the in-progress rows need
		if c.Get("Fail") != "" {
			return fiber.NewError(fiber.StatusInternalServerError, "failed as asked")
		}
		p = l.pay(who, p)
		c.Location("/payments/" + p.ID)
		c.Cookie(&fiber.Cookie{Name: "session", Value: fmt.Sprintf("%s-%s", who, p.ID), HTTPOnly: true})
		return c.Status(fiber.StatusCreated).JSON(p)
	})
	app.Get("/payments", func(c *fiber.Ctx) error {
		who, ok := caller(c.Get(fiber.HeaderAuthorization))
		if !ok {
			return fiber.NewError(fiber.StatusUnauthorized, "no bearer token")
		}
		return c.JSON(fiber.Map{"count": l.count(who, c.Query("customer"))})
	})
	return app
}
