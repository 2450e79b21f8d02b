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
// connection are not covered. The package's Example shows such a handler.
//
// # How Do works
//
// Do takes a connection from the pool (waiting at most WithAcquireTimeout) and,
// in one round trip (BEGIN pipelined with one statement, through pgx's
// Batch.BeginTx), begins a transaction and claims the key or reads the record
// that stops the claim:
//
//	WITH claimed AS (
//	    INSERT INTO idem_keys AS k (scope, key, fingerprint, owner_token, state, created_at, expires_at)
//	    SELECT $scope, $key, $fingerprint, $owner, 'claimed', clock_timestamp(), clock_timestamp() + $ttl
//	     WHERE set_config('lock_timeout', $wait || left(set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true), 0), true) IS NOT NULL
//	       AND NOT EXISTS (SELECT 1 FROM idem_keys WHERE scope = $scope AND key = $key AND expires_at > clock_timestamp())
//	    ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, owner_token = EXCLUDED.owner_token,
//	        state = 'claimed', status = NULL, header_names = NULL, header_values = NULL, body = NULL,
//	        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
//	     WHERE k.expires_at <= clock_timestamp()
//	    RETURNING k.owner_token, k.fingerprint, k.state, pg_advisory_xact_lock($mark),
//	              set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true))
//	SELECT true, owner_token, fingerprint, state, NULL, NULL, NULL, NULL FROM claimed
//	UNION ALL
//	SELECT false, owner_token, fingerprint, state, status, header_names, header_values, body FROM idem_keys
//	 WHERE scope = $scope AND key = $key AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM claimed)
//
// The lock_timeout of the claim ($wait, see below) is set before the insert
// can wait and put back, for the handler, once the row is held. A true row means
// the key was free or its record had expired: this transaction holds the claim,
// the row lock of an uncommitted row. RETURNING, evaluated only for the row
// claimed, also takes a transaction-scoped advisory lock, $mark, keyed by a hash
// of (table, scope, key, fingerprint). Do then runs the handler with the
// transaction in its context. If the response is kept, Do records it with a
// compare-and-set on the owner token and commits, both pipelined in one round
// trip:
//
//	WITH done AS (UPDATE idem_keys SET state = 'done', status = $status, header_names = $names,
//	        header_values = $values, body = $body, expires_at = <now + TTL, see below>
//	    WHERE scope = $scope AND key = $key AND owner_token = $owner AND state = 'claimed' RETURNING 1)
//	SELECT CASE WHEN (SELECT count(*) FROM done) = 1 THEN 1
//	    ELSE ('pgstore: claim lost, rows updated: ' || (SELECT count(*) FROM done))::int END;
//	COMMIT;
//
// (A compare-and-set that matches no row fails the statement, so that
// PostgreSQL skips the pipelined COMMIT.)
// If the UPDATE or the COMMIT fails, the business writes are gone with it and Do
// returns an error wrapping server.ErrNotRecorded. The middleware then answers
// that the outcome was not recorded, without the handler's response; here that
// outcome is known: nothing happened (the claim, the business write and the
// record rolled back together), the key is free, and a retry runs the handler
// once, which is correct. This store never marks a key outcome unknown. The
// exception is an effect the handler made outside the transaction (an email, a
// call to another service, a write on another connection): it stays, and the
// retry repeats it. If the response is not kept,
// or the handler panics, Do rolls back. Both run on a context detached from the
// request (WithFinishTimeout), so a client that disconnects still ends the
// transaction; a connection that cannot is closed, and PostgreSQL rolls back.
//
// A false row is the live record that stopped the claim: OutcomeReplayed (same
// fingerprint, byte for byte) or OutcomeMismatch. No row at all means the claim
// met a row its snapshot, taken before any wait, does not show (an owner that
// committed meanwhile): Do claims again. Committed rows always hold a
// response: a claim is only ever committed together with it.
//
// A claim that meets the uncommitted row of a request in progress waits for it,
// for Request.Wait at most (capped by WithLockTimeout; a Wait of zero waits 20ms,
// PostgreSQL's lock_timeout having no "no wait"): if that request commits within
// it, the duplicate gets its replay; if it rolls back (5xx, panic, a crash), the
// duplicate holds the claim and runs the handler itself. The wait is
// PostgreSQL's own lock queue, so no polling, and it ends when the duplicate's
// context does. Past the wait (SQLSTATE 55P03), Do probes the owner's advisory
// lock to tell the cases apart: the same fingerprint is OutcomeInProgress,
// another is OutcomeMismatch. RetryAfter is the owner's Request.LockTTL less how
// long its transaction has been open (pg_locks and pg_stat_activity), or
// InProgressRetryAfter past that or when the owner's session is not visible. A
// time-out with no owner and no record (lock_timeout also bounds the wait to
// extend the table) claims once more.
//
// A waiting duplicate holds a connection of its own, never anything the owner
// needs (the owner already has its connection and its row). Waiting duplicates
// do take connections from the pool; WithAcquireTimeout bounds how long any Do
// waits for one (ErrPoolExhausted: the middleware answers 503 with
// Retry-After, and the handler does not run), WithLockTimeout bounds how long a
// duplicate keeps one, and WithReservedConns keeps some for everything but
// handlers.
//
// A store that cannot be reached fails Do before the handler runs; the
// middleware answers 503. The record expires TTL after it is written (to within
// the smaller of 1s and TTL/10, so that a quick handler's record is updated in
// place), not after the claim, so a handler slower than the TTL still leaves a
// record to replay. An expired record is taken over by the next claim, and
// deleted by DeleteExpired, which removes at most a batch of rows per
// statement, skipping rows a claim holds:
//
//	DELETE FROM idem_keys WHERE ctid = ANY (ARRAY(
//	    SELECT ctid FROM idem_keys WHERE expires_at <= clock_timestamp() LIMIT $batch FOR UPDATE SKIP LOCKED))
//
// # PgBouncer
//
// The store works through PgBouncer in transaction pooling mode (and session
// mode); not statement mode, where no transaction spans statements. Everything
// the store does in a transaction stays in it (lock_timeout is set with
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
//	) WITH (fillfactor = 80);     -- room for the in-place (HOT) update that records the response
//	CREATE INDEX IF NOT EXISTS idem_keys_expires_at_idx ON idem_keys (expires_at);
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
//   - A concurrent duplicate holds a connection too while it waits, up to its
//     Request.Wait (at most the lock timeout, default 10s); many duplicates of
//     one slow request can empty the pool, after which Do fails within the
//     acquire timeout (default 1s) with ErrPoolExhausted (503) instead of
//     hanging.
//   - Handlers never take the last WithReservedConns connections of the pool
//     (default an eighth of MaxConns, at least one): however slow they are,
//     replays, duplicates and the application's other queries find a
//     connection. A new request that finds every handler slot taken waits for
//     one, holding no connection, up to the acquire timeout, then gets 503.
//   - Per executed request: BEGIN with the claim (one round trip, two
//     statements), the handler's own statements, and the record with COMMIT
//     (one round trip): the round trips of a handler that runs its own
//     transaction. A replay is
//     BEGIN with the claim, then ROLLBACK. The row is written twice (insert,
//     then an in-place update) in one transaction, so one WAL flush.
//   - The advisory lock keys share the database's advisory lock space with the
//     application's; they are 64-bit hashes, so a collision is improbable and
//     only ever turns a 422 into a 409.
//
// # Options
//
// An impossible option value is a programming error: the option panics when
// it is made, with a message naming it and what it wants (WithLockTimeout(0)
// panics "pgstore: WithLockTimeout(0s): want between 1ms and 1h"). New panics
// on a nil pool or a nil Option, and on what only the pool can tell:
// WithReservedConns(n) with n not below the pool's MaxConns. New does no I/O
// and returns no error; Migrate and Do report the database's errors. It is the
// rule of every idem package.
package pgstore
