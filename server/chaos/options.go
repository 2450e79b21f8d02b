package chaos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"
)

// An Option configures an Injector. An impossible setting panics when the
// option is created, with a message naming it (see the package documentation).
type Option func(*config)

type config struct {
	headers  bool
	failRate float64
	dropRate float64
	delayMax time.Duration
	rand     func() float64
	crash    func()
	// sleep is how AfterWrite waits out Chaos-Delay-After-Write; only
	// in-package tests replace it, to hold a request in that window.
	sleep func(time.Duration)
}

func defaultConfig() config {
	return config{
		headers: true,
		rand:    rand.Float64,
		crash:   func() { panic(http.ErrAbortHandler) },
		sleep:   time.Sleep,
	}
}

// WithHeaders switches the Chaos-* request headers on or off (default on).
// Off, they are ignored; the random rates still apply.
func WithHeaders(on bool) Option {
	return func(c *config) { c.headers = on }
}

// WithFailRate answers this fraction of requests (0 to 1) with 503 and
// Retry-After: 1, doing no work (default 0).
func WithFailRate(p float64) Option {
	checkRate("WithFailRate", p)
	return func(c *config) { c.failRate = p }
}

// WithDropRate cuts the connection of this fraction of requests (0 to 1) after
// their response was recorded, instead of sending it (default 0).
func WithDropRate(p float64) Option {
	checkRate("WithDropRate", p)
	return func(c *config) { c.dropRate = p }
}

// WithDelayMax delays every request's business write by a random duration in
// [0, d) (default 0: no random delay). d is at most MaxDelay.
func WithDelayMax(d time.Duration) Option {
	if d < 0 || d > MaxDelay {
		panic(fmt.Sprintf("chaos: WithDelayMax(%v): want 0 <= d <= %v", d, MaxDelay))
	}
	return func(c *config) { c.delayMax = d }
}

// WithRand sets the source of the random faults: a function returning a number
// in [0, 1), safe for concurrent use (default math/rand/v2.Float64).
func WithRand(f func() float64) Option {
	if f == nil {
		panic("chaos: WithRand(nil): want a function")
	}
	return func(c *config) { c.rand = f }
}

// WithCrash sets what Chaos-Crash does after the business write. The default
// panics with http.ErrAbortHandler, which aborts the handler (and the
// connection) without killing the process; cmd/idem-server exits the process.
func WithCrash(f func()) Option {
	if f == nil {
		panic("chaos: WithCrash(nil): want a function")
	}
	return func(c *config) { c.crash = f }
}

// checkRate panics, naming the option, unless p is a rate from 0 to 1.
func checkRate(name string, p float64) {
	if math.IsNaN(p) || p < 0 || p > 1 {
		panic(fmt.Sprintf("chaos: %s(%v): want 0 <= p <= 1", name, p))
	}
}
