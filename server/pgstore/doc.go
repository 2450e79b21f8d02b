// Package pgstore is a server.Store on PostgreSQL (through pgx v5) in which the
// claim of an idempotency key, the handler's business writes and the recorded
// response commit in one transaction: a crash, a panic or a 5xx between the
// business write and the record leaves neither, and a retry runs the handler
// again. It lives in its own module so that users of idem's client never
// download pgx.
//
// # Usage
//
//	pool, err := pgstore.NewPool(ctx, "postgres://...") // direct or through PgBouncer
//	store := pgstore.New(pool)
//	if err := store.Migrate(ctx); err != nil { ... } // once, at start-up; idempotent
//	stop := store.StartReaper(ctx, pgstore.Reaper{})  // deletes expired records
//	defer stop()
//
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(create)))
//
//	func create(w http.ResponseWriter, r *http.Request) {
//		tx := pgstore.Tx(r.Context()) // the store's transaction: write through it
//		_, err := tx.Exec(r.Context(), "INSERT INTO payments ...", ...)
//		...
//	}
//
// # What the application does
//
//   - Build the pool with NewPool, or apply ConfigurePool to a pgxpool.Config:
//     it picks a query mode that works through PgBouncer (transaction or
//     session pooling) and sets the TCP timeouts that end a partitioned
//     connection. Size the pool for the keyed requests in flight: each holds a
//     connection for its handler's whole duration.
//   - Call Migrate once at start-up. It creates the table and index if they
//     are missing, may run from several instances at once, and refuses a pool
//     whose statement cache would fail behind a proxy
//     (ErrStatementCacheBehindProxy).
//   - Delete expired records: StartReaper, or DeleteExpired from a job.
//   - In the handler, write through Tx(r.Context()) and never commit or roll
//     back: the store commits after recording the response (Commit returns
//     ErrSharedTx), or rolls back when the middleware does not keep the
//     response (a 5xx, a panic, a refusal: docs/server.md in the repository).
//     Use tx.Begin for a savepoint.
//   - Writes on another connection, and effects outside the database (a
//     payment provider's charge, an email), are not covered: a handler that
//     made one declares it with server.DeclareEffect, and its answer, a 5xx
//     included, is then committed with the transaction and recorded. The
//     package's Example shows such a handler. A handler about to start one
//     that it cannot confirm afterwards (a request to an API it does not
//     own) calls server.BeginEffect first: the store commits a mark of its
//     own on another pooled connection before it returns, so that a crash
//     before the record leaves the key outcome-unknown, never run again.
//   - Ping tells a readiness check whether the store can serve now.
//
// The options bound the store's waits (WithAcquireTimeout, WithFinishTimeout,
// WithLockTimeout), keep connections for everything but handlers
// (WithReservedConns), set PostgreSQL's own timeouts on each claim's
// transaction (WithIdleInTxTimeout, WithStatementTimeout), and name the table
// (WithTable).
//
// # How it works
//
// docs/stores.md in the repository says how the store claims a key (the SQL of
// the claim, the record, the reaper and the table), how duplicates wait
// without holding a connection, what it costs per request, how it behaves
// through PgBouncer, under a partition and during a rolling upgrade, and how it
// compares with the Redis and memory stores. The rules every store follows are
// in docs/CONTRACT.md; the answers the middleware gives are in docs/server.md
// and docs/problems.md.
//
// # Options
//
// An impossible option value is a programming error: the option panics when
// it is made, with a message "pgstore: <Func>(<value>): want <what is
// allowed>" (WithLockTimeout(0) panics "pgstore: WithLockTimeout(0s): want
// 1ms <= d <= 1h"). New panics, in the same form, on a nil pool or a nil
// Option, and on what only the pool can tell: WithReservedConns(n) with n not
// below the pool's MaxConns. New does no I/O
// and returns no error; Migrate and Do report the database's errors. It is the
// rule of every idem package.
package pgstore
