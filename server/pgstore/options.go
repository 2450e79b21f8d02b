package pgstore

import (
	"fmt"
	"regexp"
	"time"
)

// Defaults of the options.
const (
	DefaultTable           = "idem_keys"
	DefaultLockTimeout     = 10 * time.Second
	DefaultFinishTimeout   = 5 * time.Second
	DefaultAcquireTimeout  = time.Second
	DefaultIdleInTxTimeout = time.Minute
)

// An Option configures a Store. An option with an impossible value panics when
// it is made, with the message the package documentation describes.
type Option func(*config)

type config struct {
	table           string // as given, validated
	lockTimeout     time.Duration
	finishTimeout   time.Duration
	acquireTimeout  time.Duration
	reserved        int           // -1: the default, see WithReservedConns
	idleInTx        time.Duration // 0: PostgreSQL's own setting
	statement       time.Duration // 0: PostgreSQL's own setting
	scopeMaxEntries int64
	scopeMaxBytes   int64
}

// tableName is a lower-case SQL identifier, optionally schema-qualified. The limit
// of 48 characters leaves room for the derived index name within PostgreSQL's 63.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,47}\.)?[a-z_][a-z0-9_]{0,47}$`)

// WithTable sets the table that holds the records (default "idem_keys"). name must
// be a plain lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 48 characters),
// optionally qualified by a schema ("idem.keys", the schema must exist); it is
// quoted in every statement. It panics on any other name.
func WithTable(name string) Option {
	if !tableName.MatchString(name) {
		panic(fmt.Sprintf("pgstore: WithTable(%q): want a lower-case SQL identifier of at most 48 characters, optionally schema-qualified", name))
	}
	return func(c *config) { c.table = name }
}

// WithLockTimeout bounds how long a concurrent duplicate waits for the key of a
// request still in progress, whatever its Request.Wait asks (default 10s): the
// duplicate waits the smaller of the two, then Do reports OutcomeInProgress; if
// the first request finishes within it, the duplicate replays its response
// instead (or runs, if the first rolled back). A waiting duplicate holds no
// connection between its looks (docs/stores.md in the repository says how).
// It panics unless d is between 1ms and 1h.
func WithLockTimeout(d time.Duration) Option {
	if d < time.Millisecond || d > time.Hour {
		panic(fmt.Sprintf("pgstore: WithLockTimeout(%v): want 1ms <= d <= 1h", d))
	}
	return func(c *config) { c.lockTimeout = d }
}

// WithIdleInTxTimeout sets PostgreSQL's idle_in_transaction_session_timeout
// for the transaction of each claim (default DefaultIdleInTxTimeout, a minute;
// 0 keeps the session's own setting): PostgreSQL ends a session whose claim's
// transaction has waited that long for its next statement, which rolls back the
// transaction (the business writes in it too) and frees the key. It is what
// bounds, on the server's side, a claim whose process is cut off or stalled
// mid-handler; a handler that spends longer than d between two statements
// (a slow call to another service, holding the transaction) has its
// transaction ended the same way, and Do then fails with server.ErrNotRecorded,
// with nothing committed. It panics if d is negative.
func WithIdleInTxTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("pgstore: WithIdleInTxTimeout(%v): want a duration >= 0", d))
	}
	return func(c *config) { c.idleInTx = d }
}

// WithStatementTimeout sets PostgreSQL's statement_timeout for the
// transaction of each claim (default 0: the session's own setting): every
// statement the handler runs through Tx, and the store's own, is cancelled by
// the server once it has run for d (SQLSTATE 57014), so a business write stuck
// behind another transaction's row lock, or a runaway query, fails the handler
// in bounded time instead of holding the key. It bounds what PostgreSQL
// executes, not a network that does not answer (see WithIdleInTxTimeout and
// ConfigurePool for that). It panics if d is negative.
func WithStatementTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("pgstore: WithStatementTimeout(%v): want a duration >= 0", d))
	}
	return func(c *config) { c.statement = d }
}

// WithFinishTimeout bounds the statements Do runs after the handler returned
// (record, COMMIT, ROLLBACK) on a context detached from the request (default 5s),
// so a client that disconnects still ends the transaction, and each round trip
// of the claim (BEGIN with the claim, the probe of an owner), so a PostgreSQL
// that does not answer fails Do within it. Every one of them is bounded by the
// request context's deadline too (server.LimitRequestTime), whichever ends
// first, so that a request is answered within its deadline even when
// PostgreSQL stops answering after the handler ran. It panics unless d is
// positive.
func WithFinishTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("pgstore: WithFinishTimeout(%v): want a positive duration", d))
	}
	return func(c *config) { c.finishTimeout = d }
}

// WithAcquireTimeout bounds how long Do waits for a connection from the pool
// (default 1s). When every connection is taken, by slow handlers for example, Do
// fails within d without running the handler, and the middleware answers 503 with
// Retry-After, instead of leaving the request to hang. It panics unless d is
// positive.
func WithAcquireTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("pgstore: WithAcquireTimeout(%v): want a positive duration", d))
	}
	return func(c *config) { c.acquireTimeout = d }
}

// WithScopeLimits bounds what the records of one scope (server.WithScope's
// principal or tenant) may take in the table: at most entries live records
// and bytes bytes, each record counted as pg_column_size of its row; by
// default DefaultScopeMaxEntries (100,000) and DefaultScopeMaxBytes (64 MiB).
// A scope at or past either gets ErrScopeFull for its new keys (the
// middleware answers 503 with Retry-After, before the handler runs) until
// some of its records expire; its replays, its duplicates of keys in
// progress, and every other scope are served. The empty scope (a middleware
// without WithScope) is not bounded. Each process counts a scope's live
// records in the table (one statement, pipelined with a claim of the scope)
// when it first serves the scope, then every 10 s, or every second once the
// scope is past half its share, and adds the records it writes itself in
// between; so the bound is approximate, toward letting a scope hold a little
// more: what other processes wrote since the last count, and the records in
// flight when the scope reached its bound. docs/stores.md in the repository
// says what it costs and how to bound the table as a whole. It panics unless
// both are at least 1.
func WithScopeLimits(entries, bytes int64) Option {
	if entries < 1 || bytes < 1 {
		panic(fmt.Sprintf("pgstore: WithScopeLimits(%d, %d): want both at least 1", entries, bytes))
	}
	return func(c *config) { c.scopeMaxEntries, c.scopeMaxBytes = entries, bytes }
}

// WithReservedConns keeps n of the pool's connections out of reach of handlers
// (default: an eighth of the pool's MaxConns, at least 1, and 0 for a pool of one
// connection). A keyed request holds its connection for its handler's whole
// duration; with the reserve, slow handlers can take at most MaxConns - n
// connections, and replays, duplicates (409) and the application's other queries
// on the pool still find one. A new request that finds every handler slot taken
// waits for one up to the acquire timeout, holding no connection, then fails
// with ErrPoolExhausted (503). The slots are counted per Store. It panics if n is
// negative, and New panics unless n is less than the pool's MaxConns.
func WithReservedConns(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("pgstore: WithReservedConns(%d): want n >= 0", n))
	}
	return func(c *config) { c.reserved = n }
}
