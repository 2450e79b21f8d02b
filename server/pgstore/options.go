package pgstore

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Defaults of the options.
const (
	DefaultTable          = "idem_keys"
	DefaultLockTimeout    = 10 * time.Second
	DefaultFinishTimeout  = 5 * time.Second
	DefaultAcquireTimeout = time.Second
)

// ErrInvalidOption is wrapped by the error New returns for an impossible option;
// the message names the option.
var ErrInvalidOption = errors.New("pgstore: invalid option")

// An Option configures a Store; see New.
type Option func(*config) error

type config struct {
	table          string // as given, validated
	lockTimeout    time.Duration
	finishTimeout  time.Duration
	acquireTimeout time.Duration
	reserved       int // -1: the default, see WithReservedConns
}

// tableName is a lower-case SQL identifier, optionally schema-qualified. The limit
// of 48 characters leaves room for the derived index name within PostgreSQL's 63.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,47}\.)?[a-z_][a-z0-9_]{0,47}$`)

// WithTable sets the table that holds the records (default "idem_keys"). name must
// be a plain lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 48 characters),
// optionally qualified by a schema ("idem.keys", the schema must exist); it is
// quoted in every statement.
func WithTable(name string) Option {
	return func(c *config) error {
		if !tableName.MatchString(name) {
			return fmt.Errorf("%w: WithTable(%q): want a lower-case SQL identifier of at most 48 characters, optionally schema-qualified", ErrInvalidOption, name)
		}
		c.table = name
		return nil
	}
}

// WithLockTimeout bounds how long a concurrent duplicate waits for the row lock of
// a request still in progress, whatever its Request.Wait asks (default 10s): the
// duplicate waits the smaller of the two, then Do reports OutcomeInProgress. The
// wait is PostgreSQL's lock_timeout, set for the claim statement only; if the first
// request finishes within it, the duplicate replays its response instead (or runs,
// if the first rolled back). A waiting duplicate holds a pooled connection, so this
// also bounds how long duplicates can keep connections from other requests. d must
// be between 1ms and 1h.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d > time.Hour {
			return fmt.Errorf("%w: WithLockTimeout(%v): want between 1ms and 1h", ErrInvalidOption, d)
		}
		c.lockTimeout = d
		return nil
	}
}

// WithFinishTimeout bounds the statements Do runs after the handler returned
// (record, COMMIT, ROLLBACK) on a context detached from the request (default 5s),
// so a client that disconnects still ends the transaction. d must be positive.
func WithFinishTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithFinishTimeout(%v): want a positive duration", ErrInvalidOption, d)
		}
		c.finishTimeout = d
		return nil
	}
}

// WithAcquireTimeout bounds how long Do waits for a connection from the pool
// (default 1s). When every connection is taken, by slow handlers for example, Do
// fails within d without running the handler, and the middleware answers 503 with
// Retry-After, instead of leaving the request to hang. d must be positive.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithAcquireTimeout(%v): want a positive duration", ErrInvalidOption, d)
		}
		c.acquireTimeout = d
		return nil
	}
}

// WithReservedConns keeps n of the pool's connections out of reach of handlers
// (default: an eighth of the pool's MaxConns, at least 1, and 0 for a pool of one
// connection). A keyed request holds its connection for its handler's whole
// duration; with the reserve, slow handlers can take at most MaxConns - n
// connections, and replays, duplicates (409) and the application's other queries
// on the pool still find one. A new request that finds every handler slot taken
// waits for one up to the acquire timeout, holding no connection, then fails
// with ErrPoolExhausted (503). The slots are counted per Store. n must be at
// least 0 and less than the pool's MaxConns.
func WithReservedConns(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: WithReservedConns(%d): want 0 or more", ErrInvalidOption, n)
		}
		c.reserved = n
		return nil
	}
}
