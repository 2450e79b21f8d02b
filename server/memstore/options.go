package memstore

import (
	"fmt"
	"time"
)

// DefaultMaxEntries is the capacity of a Store built without WithMaxEntries.
const DefaultMaxEntries = 100_000

// An Option configures a Store. An impossible setting panics when the option
// is created, naming it, and New panics on a nil Option: the rule of every
// server-side package (see package server).
type Option func(*config)

type config struct {
	now        func() time.Time // nil: the system clock
	maxEntries int
}

func defaultConfig() config {
	return config{maxEntries: DefaultMaxEntries}
}

// WithClock sets the clock that stamps claims and expires records (default
// time.Now). Tests pass a fake clock.
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("memstore: WithClock(nil): clock must not be nil")
	}
	return func(c *config) { c.now = now }
}

// WithMaxEntries bounds how many records and claims the Store holds at once
// (default DefaultMaxEntries). When it is reached and no record has expired, Do
// fails with ErrFull.
func WithMaxEntries(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("memstore: WithMaxEntries(%d): must be at least 1", n))
	}
	return func(c *config) { c.maxEntries = n }
}
