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
//	store := pgstore.New(pool) // options: WithTable, WithLockTimeout, WithAcquireTimeout, WithReservedConns, WithFinishTimeout
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
// A handler writes through Tx(ctx) and never commits or rolls back itself: the
// store commits after recording the response (Commit on that Tx returns
// ErrSharedTx), or rolls back when the middleware says the response is not kept
// (a 5xx, a panic, a streamed or hijacked response). Writes made on another
// connection are not covered, nor effects outside the database (a payment
// provider's charge): a handler that made one declares it with
// server.DeclareEffect, and its answer, a 5xx included, is then committed with
// the transaction and recorded. The package's Example shows such a handler.
//
// # How Do works
//
// Do takes a connection from the pool (waiting at most WithAcquireTimeout) and,
// in one round trip (three statements pipelined, BEGIN first through pgx's
// Batch.BeginTx), begins a transaction and claims the key, or reads the record
// that stops the claim. The claim is a transaction-scoped advisory lock keyed by
// a hash of (table, scope, key), which the first claim takes only if it is free:
//
//	BEGIN;
//	SELECT CASE WHEN NOT pg_try_advisory_xact_lock($key_lock) THEN false
//	            WHEN NOT pg_try_advisory_xact_lock($mark) THEN false
//	            ELSE set_config('idem.owner', $owner, true) IS NOT NULL END;
//	SELECT expires_at > clock_timestamp(), fingerprint, owner_token, state, status, header_names, header_values, body
//	  FROM idem_keys WHERE scope = $scope AND key = $key;
//
// With the key's lock the first statement takes a second advisory lock, $mark,
// keyed by a hash of (table, scope, key, fingerprint), and keeps the owner
// token, a random text of this Do, in a transaction-local setting. The second
// statement is a statement of its own so that its snapshot is taken once the
// lock is held: it shows the record of any owner that held the key before.
//
// If the first statement returned true and the second finds no live record,
// this transaction holds the claim. Do then runs the handler with the
// transaction in its context. If the response is kept, Do writes the record and
// commits, both pipelined in one round trip:
//
//	INSERT INTO idem_keys (scope, key, fingerprint, owner_token, state, status, header_names, header_values, body, created_at, expires_at)
//	VALUES ($scope, $key, $fingerprint,
//	        CASE WHEN current_setting('idem.owner', true) = $owner THEN $owner
//	             ELSE ('pgstore: not the claim''s transaction, owner ' || ...)::int::text END,
//	        'done', $status, $names, $values, $body, now(), clock_timestamp() + $ttl);
//	COMMIT;
//
// Over an expired record the INSERT is an upsert that overwrites the row only if
// it is still expired (takeOver in sql.go). The record is written only where
// no live record is, and only by the claim's own transaction: the CASE fails
// the statement if the handler ended that transaction (even if it began
// another), a row of the key fails it as a unique violation, and PostgreSQL
// then skips the pipelined COMMIT. If the INSERT or the COMMIT fails, the
// business writes are gone with it and Do returns an error wrapping
// server.ErrNotRecorded. The middleware then answers that the outcome was not
// recorded, without the handler's response; here that outcome is known:
// nothing happened (the claim, the business write and the record rolled back
// together), the key is free, and a retry runs the handler once, which is
// correct. This store never marks a key outcome unknown. The exception is an
// effect the handler made outside the transaction (an email, a call to another
// service, a write on another connection): it stays, and the retry repeats it.
// If the response is not kept, or the handler panics, Do rolls back. Both run on
// a context detached from the request (WithFinishTimeout), so a client that
// disconnects still ends the transaction; a connection that cannot is closed,
// and PostgreSQL rolls back, which releases the claim.
//
// A live record found by the second statement stops the claim, whether or not
// the first took the lock: OutcomeReplayed (same fingerprint, byte for byte) or
// OutcomeMismatch; Do rolls back. A replay never waits for the lock: while
// another request holds it, the second statement still shows the record.
// Committed rows always hold a response: a row is only ever written together
// with it.
//
// When the key's lock is taken and no live record is visible, a request holds
// the key in progress. Do probes the owner's $mark to tell the cases apart: the
// same fingerprint is OutcomeInProgress, another is OutcomeMismatch. RetryAfter
// is the owner's Request.LockTTL less how long its transaction has been open
// (pg_locks and pg_stat_activity), or InProgressRetryAfter past that or when
// the owner's session is not visible. A probe that finds no owner of that
// fingerprint and no record (the owner has another fingerprint, or has just
// rolled back) claims once more.
//
// With a Request.Wait (capped by WithLockTimeout), an in-progress duplicate
// waits without holding anything: it rolls back, returns its connection, and
// looks again (one claim and, if still busy, one probe: two round trips on a
// pooled connection) after 5 ms, then at doubling intervals capped at 50 ms,
// until the owner commits (the duplicate replays its record), rolls back (5xx,
// panic, a crash: the duplicate claims the key and runs the handler itself),
// the wait is over (OutcomeInProgress), or its context ends (an error). At most
// WithReservedConns looks run at once (an eighth of the pool when nothing is
// reserved), so any number of waiting duplicates, of one tenant or many, take
// no more than that share of the pool, and only for a look at a time: they
// cannot make another tenant's new keys fail
// (TestWaitingDuplicatesDoNotStarveOtherTenants: 3 duplicates on a pool of 4,
// 19 on a pool of 20, and every new key of another tenant runs). A look that
// finds no free connection ends the wait with the last in-progress answer.
// Waiting in PostgreSQL's lock queue instead would answer sooner, but holds a
// connection and a backend per waiter for the whole wait: a few duplicates then
// take the pool.
//
// WithAcquireTimeout bounds how long any Do waits for a connection
// (ErrPoolExhausted: the middleware answers 503 with Retry-After, and the
// handler does not run), and WithReservedConns keeps some for everything but
// handlers.
//
// A store that cannot be reached fails Do before the handler runs; the
// middleware answers 503. The record expires TTL after it is written, not
// after the claim, so a handler slower than the TTL still leaves a record to
// replay; created_at is the claim (the transaction's start). An expired record
// is taken over by the next claim, and deleted by DeleteExpired, which removes
// at most a batch of rows per statement, skipping rows locked at that moment:
//
//	DELETE FROM idem_keys WHERE ctid = ANY (ARRAY(
//	    SELECT ctid FROM idem_keys WHERE expires_at <= clock_timestamp() LIMIT $batch FOR UPDATE SKIP LOCKED))
//
// A claim holds the key, not the expired row, while its handler runs: if the
// reaper deletes the row meanwhile, the record is inserted all the same.
//
// Versions up to v0.1.0 claimed by inserting a 'claimed' row and recorded by
// updating it. The table is unchanged, and both versions can serve one table
// during a rolling upgrade without a business write committing twice for a key:
// the primary key decides, and a business write commits only with its record.
// They do not wait for each other's claims as one version does, though: a
// duplicate that meets a claim of the other version may run its handler and
// then fail its record (ErrNotRecorded, its business write rolled back), or fail
// on a deadlock PostgreSQL breaks (503), where one version alone would have
// waited and replayed, or answered 409 or 422.
//
// # Time bounds and partitions
//
// Every statement the store sends is bounded: each round trip of the claim
// (BEGIN with the claim, the probe of an owner) and everything after the
// handler (record and COMMIT, or ROLLBACK) by WithFinishTimeout (5 s); a wait
// for a pooled connection by WithAcquireTimeout (1 s). A PostgreSQL that does
// not answer therefore fails Do before the handler within the finish timeout
// (the middleware answers 503), or after it with server.ErrNotRecorded
// (outcome unknown; nothing was committed), and pgx closes the connection.
//
// On the server's side, the claim's transaction carries
// idle_in_transaction_session_timeout (WithIdleInTxTimeout, a minute by
// default): if the owner's process is cut off or stalled mid-handler,
// PostgreSQL ends the session once it has waited that long for a statement,
// which rolls back the business writes with the claim and frees the key, so
// other instances run it (once: the cut-off owner's commit cannot succeed).
// Pools built with NewPool or ConfigurePool also carry TCP keepalives and
// TCP_USER_TIMEOUT on both sides (about 30 s), so a partition ends idle and
// busy connections alike instead of after the kernel's minutes or hours.
// TestPartitionMidHandlerFreesTheKey cuts a proxy between the owner and
// PostgreSQL after the business write: a duplicate on another instance runs
// about the idle timeout later, the owner's Do fails within its finish
// timeout, and one payment is committed. WithStatementTimeout (off by default)
// adds statement_timeout to the claim's transaction, so the server cancels a
// handler's statement that runs too long (a write behind another
// transaction's row lock). Otherwise the handler's own statements are bounded
// only by its context and by the TCP settings above.
//
// # PgBouncer
//
// The store works through PgBouncer in transaction pooling mode (and session
// mode); not statement mode, where no transaction spans statements. Everything
// the store does in a transaction stays in it (settings are set with
// set_config(..., true), the advisory locks are transaction-scoped), so a
// transaction's server connection is all it needs. A keyed request holds one
// server connection for its handler's whole duration (the claim is an open
// transaction): size PgBouncer's pool (default_pool_size) for the keyed
// requests in flight, as the application's own pool.
//
// pgx's default query mode caches named prepared statements per connection,
// which PgBouncer (before 1.21's max_prepared_statements) breaks: 42P05
// "prepared statement already exists", 26000 "does not exist". NewPool and
// ConfigurePool connect once and, when the server sees another client port
// than the one this process connected from (a proxy), switch the pool to
// QueryExecModeCacheDescribe (unnamed statements). Directly, they keep the
// cache: unnamed statements cost 24-50% more per Do there
// (BenchmarkQueryExecModes). A mode named in the connection string
// (default_query_exec_mode) is kept. Migrate uses the simple protocol, so it
// works on any pool, and refuses a pool with the statement cache behind a proxy
// (ErrStatementCacheBehindProxy) rather than let the first requests fail.
//
// # Table
//
// Migrate runs, under a transaction-scoped advisory lock so that several
// instances may start at once (the index only when it is missing: CREATE INDEX
// would wait for every claim in progress):
//
//	CREATE TABLE IF NOT EXISTS idem_keys (
//	    scope         text        NOT NULL,
//	    key           text        NOT NULL,
//	    fingerprint   text        NOT NULL,
//	    owner_token   text        NOT NULL,
//	    state         text        NOT NULL CHECK (state IN ('claimed', 'done')),
//	    status        integer,
//	    header_names  bytea[],    -- one element per header value, in order
//	    header_values bytea[],    -- NULL element: a name with no values
//	    body          bytea,
//	    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
//	    expires_at    timestamptz NOT NULL,
//	    PRIMARY KEY (scope, key)
//	);
//	CREATE INDEX IF NOT EXISTS idem_keys_expires_at_idx ON idem_keys (expires_at);
//
// This version writes every row 'done', with its response; 'claimed' rows were
// the uncommitted claims of earlier versions. Tables those created have
// fillfactor 80, which left room for the in-place update of the record; it does
// no harm, and Migrate leaves it.
//
// Times are the database server's clock_timestamp(), so instances with skewed
// clocks agree. Scope and key are text: a scope with a NUL byte or invalid UTF-8
// makes Do fail (503), never mix records.
//
// # Costs
//
//   - A pooled connection is held for the whole handler (the transaction stays
//     open while it runs): size the pool for the number of keyed requests in
//     flight, plus the other work of the process.
//   - A concurrent duplicate that waits (Request.Wait, at most the lock
//     timeout, default 10s) holds no connection between its looks: about 20
//     looks a second, two round trips each, at most WithReservedConns looks
//     at once across every waiter of the Store.
//   - Handlers never take the last WithReservedConns connections of the pool
//     (default an eighth of MaxConns, at least one): however slow they are,
//     replays, duplicates and the application's other queries find a
//     connection. A new request that finds every handler slot taken waits for
//     one, holding no connection, up to the acquire timeout, then gets 503.
//   - Per executed request: BEGIN with the claim (one round trip, three
//     statements), the handler's own statements, and the record with COMMIT
//     (one round trip): the round trips of a handler that runs its own
//     transaction. A replay is BEGIN with the claim, then ROLLBACK. The record
//     is one row inserted once, with its response, in the handler's
//     transaction, so one WAL flush; the claim writes nothing.
//   - The advisory lock keys share the database's advisory lock space with the
//     application's; they are 64-bit hashes, so a collision is improbable and
//     only ever makes two keys' requests wait for each other (past the wait, a
//     409 or 422 instead of a run).
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
