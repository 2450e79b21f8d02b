package memstore

import (
	"fmt"
	"time"
)

// Defaults of a Store's bounds.
const (
	// DefaultMaxEntries is how many records and claims a Store holds at most.
	DefaultMaxEntries = 100_000
	// DefaultMaxBytes is how many bytes of records and claims a Store holds
	// at most (256 MiB).
	DefaultMaxBytes = 256 << 20
	// DefaultScopeShare is the share of both bounds each scope is guaranteed.
	DefaultScopeShare = 0.125
)

// An Option configures a Store. An impossible setting panics when the option
// is created, and New panics on a nil Option, with the message the package
// documentation describes.
type Option func(*config)

type config struct {
	now        func() time.Time // nil: the system clock
	maxEntries int
	maxBytes   int64
	scopeShare float64
}

func defaultConfig() config {
	return config{maxEntries: DefaultMaxEntries, maxBytes: DefaultMaxBytes, scopeShare: DefaultScopeShare}
}

// WithClock sets the clock that stamps claims and expires records (default
// time.Now). Tests pass a fake clock.
func WithClock(now func() time.Time) Option {
	if now == nil {
		badArg("WithClock(nil)", "a function")
	}
	return func(c *config) { c.now = now }
}

// WithMaxEntries bounds how many records and claims the Store holds at once
// (default DefaultMaxEntries). When it is reached and no record has expired, Do
// fails with ErrFull.
func WithMaxEntries(n int) Option {
	if n < 1 {
		badArg(fmt.Sprintf("WithMaxEntries(%d)", n), "n >= 1")
	}
	return func(c *config) { c.maxEntries = n }
}

// WithMaxBytes bounds the bytes the Store's records and claims take (default
// DefaultMaxBytes, 256 MiB): each is charged its key, scope, fingerprint,
// recorded response and a fixed overhead. When the bound is reached and no
// record has expired, Do fails with ErrFull. A response being recorded may
// take the Store past it by its own size; no new claim fits until it is back
// under.
func WithMaxBytes(n int64) Option {
	if n < 1 {
		badArg(fmt.Sprintf("WithMaxBytes(%d)", n), "n >= 1")
	}
	return func(c *config) { c.maxBytes = n }
}

// WithScopeShare sets the share (above 0, at most 1) of WithMaxEntries and of
// WithMaxBytes that each non-empty scope is guaranteed (default
// DefaultScopeShare, one eighth). A scope past its share may use free room
// except the store's last share, kept for the scopes within theirs; there it
// gets ErrScopeFull, answered 503, while the others keep their room. The empty scope (no server.WithScope: one scope for
// everyone) has no quota, having nobody to be fair to.
func WithScopeShare(f float64) Option {
	if !(f > 0 && f <= 1) {
		badArg(fmt.Sprintf("WithScopeShare(%v)", f), "0 < f <= 1")
	}
	return func(c *config) { c.scopeShare = f }
}

// badArg panics with "memstore: <call>: want <want>", call being the function
// and the value it was given, such as WithMaxBytes(-1): the message of every
// panic for a bad option or argument in this package.
func badArg(call, want string) {
	panic("memstore: " + call + ": want " + want)
}
