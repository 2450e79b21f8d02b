package chaos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"
)

// An Option configures an Injector.
type Option func(*config) error

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
	return func(c *config) error { c.headers = on; return nil }
}

// WithFailRate answers this fraction of requests (0 to 1) with 503 and
// Retry-After: 1, doing no work (default 0).
func WithFailRate(p float64) Option {
	return func(c *config) error {
		if err := checkRate("WithFailRate", p); err != nil {
			return err
		}
		c.failRate = p
		return nil
	}
}

// WithDropRate cuts the connection of this fraction of requests (0 to 1) after
// their response was recorded, instead of sending it (default 0).
func WithDropRate(p float64) Option {
	return func(c *config) error {
		if err := checkRate("WithDropRate", p); err != nil {
			return err
		}
		c.dropRate = p
		return nil
	}
}

// WithDelayMax delays every request's business write by a random duration in
// [0, d) (default 0: no random delay). d is at most MaxDelay.
func WithDelayMax(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > MaxDelay {
			return fmt.Errorf("chaos: WithDelayMax(%v): want 0 to %v", d, MaxDelay)
		}
		c.delayMax = d
		return nil
	}
}

// WithRand sets the source of the random faults: a function returning a number
// in [0, 1), safe for concurrent use (default math/rand/v2.Float64).
func WithRand(f func() float64) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("chaos: WithRand(nil): want a function")
		}
		c.rand = f
		return nil
	}
}

// WithCrash sets what Chaos-Crash does after the business write. The default
// panics with http.ErrAbortHandler, which aborts the handler (and the
// connection) without killing the process; cmd/idem-server exits the process.
func WithCrash(f func()) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("chaos: WithCrash(nil): want a function")
		}
		c.crash = f
		return nil
	}
}

func checkRate(name string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("chaos: %s(%v): want a rate from 0 to 1", name, p)
	}
	return nil
}
