package redisstore

import (
	"fmt"
	"time"
)

// DefaultPrefix is the prefix of every key the store writes unless WithPrefix
// changes it.
const DefaultPrefix = "idem:"

// DefaultOpTimeout bounds each Redis call unless WithOpTimeout changes it.
const DefaultOpTimeout = 2 * time.Second

// An Option configures a Store. Options are checked once, in New, which
// panics naming the option when a value is impossible.
type Option func(*config)

type config struct {
	prefix        string
	renewInterval time.Duration // 0: Request.LockTTL / 3
	opTimeout     time.Duration
}

// WithPrefix sets the prefix of every key the store writes (default "idem:").
// It must not be empty, so that the store's keys can be told apart from other
// data in the same database.
func WithPrefix(p string) Option {
	return func(c *config) {
		if p == "" {
			panic("redisstore: WithPrefix: the prefix must not be empty")
		}
		c.prefix = p
	}
}

// WithRenewInterval sets how often a claim's lease is renewed while the handler
// runs (default a third of the request's LockTTL). A lease is never renewed less
// often than every half LockTTL, whatever d says, so one late renewal cannot
// let it expire. d must be positive.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			panic(fmt.Sprintf("redisstore: WithRenewInterval: the interval must be positive, got %v", d))
		}
		c.renewInterval = d
	}
}

// WithOpTimeout bounds each Redis call the store makes (claim, renew, finish,
// release); default DefaultOpTimeout. Calls made after the handler returned use
// a context detached from the request, so this is what bounds them. d must be
// positive.
func WithOpTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			panic(fmt.Sprintf("redisstore: WithOpTimeout: the timeout must be positive, got %v", d))
		}
		c.opTimeout = d
	}
}
