// Package thirdparty runs idem-check against an idempotency layer idem did
// not write: Go Fiber v2's middleware (github.com/gofiber/fiber/v2/middleware/idempotency)
// around a tiny payments handler. It is a module of its own so that no
// library module of idem ever depends on Fiber; its test renders the
// verdicts into cmd/idem-check/README.md and, in CI, checks that the
// committed table still matches a fresh run.
package thirdparty

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
)

// MaxSlow bounds the handler's Slow header.
const MaxSlow = 10 * time.Second

// FiberApp returns a Fiber app with the payments handler behind Fiber's
// idempotency middleware, configured only where the draft names a value:
// the Idempotency-Key header (Fiber's default is X-Idempotency-Key) and the
// key lifetime; everything else is Fiber's default (36-character keys, all
// response headers kept, an in-memory store and lock).
//
// Routes: POST /payments {"customer","amount","currency"} answers 201 with
// {"id","customer","amount","currency"}, a Location and a session cookie,
// for the caller of the bearer token (none: 401); GET
// /payments?customer=C answers {"count":N} of the caller's payments.
// The request header Slow: 2s makes the handler slow (at most MaxSlow);
// Fail: 1 makes it return a 500 error through Fiber's error path.
func FiberApp(lifetime time.Duration) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	l := &ledger{counts: map[string]int{}}
	app.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Lifetime: lifetime}))
	app.Post("/payments", l.create)
	app.Get("/payments", l.count)
	return app
}

type ledger struct {
	mu     sync.Mutex
	seq    int
	counts map[string]int // by caller and customer
}

func caller(c *fiber.Ctx) (string, bool) {
	token, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	return token, ok && token != ""
}

func (l *ledger) create(c *fiber.Ctx) error {
	who, ok := caller(c)
	if !ok {
		return fiber.NewError(fiber.StatusUnauthorized, "no bearer token")
	}
	var p struct {
		Customer string `json:"customer"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := c.BodyParser(&p); err != nil || p.Customer == "" || p.Amount <= 0 || p.Currency == "" {
		return fiber.NewError(fiber.StatusBadRequest, "want {customer, amount > 0, currency}")
	}
	if s := c.Get("Slow"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxSlow {
			return fiber.NewError(fiber.StatusBadRequest, "Slow: want a duration up to "+MaxSlow.String())
		}
		time.Sleep(d) // the slow handler the in-progress rows need
	}
	if c.Get("Fail") != "" {
		return fiber.NewError(fiber.StatusInternalServerError, "failed as asked")
	}
	l.mu.Lock()
	l.seq++
	id := "pay_" + strconv.Itoa(l.seq)
	l.counts[who+"\x00"+p.Customer]++
	l.mu.Unlock()
	c.Location("/payments/" + id)
	c.Cookie(&fiber.Cookie{Name: "session", Value: fmt.Sprintf("%s-%s", who, id), HTTPOnly: true})
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": id, "customer": p.Customer, "amount": p.Amount, "currency": p.Currency})
}

func (l *ledger) count(c *fiber.Ctx) error {
	who, ok := caller(c)
	if !ok {
		return fiber.NewError(fiber.StatusUnauthorized, "no bearer token")
	}
	l.mu.Lock()
	n := l.counts[who+"\x00"+c.Query("customer")]
	l.mu.Unlock()
	return c.JSON(fiber.Map{"count": n})
}
