package pgstore

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// statements holds the SQL of one Store, built once for its table.
type statements struct {
	table         string // quoted
	migrate       string
	index         string // the expires_at index, schema-qualified, quoted
	migrateIndex  string
	tryLock       string
	tryLockCols   int // the columns tryLock returns: the claim's, then one per setting
	read          string
	probeOwner    string
	readLive      string
	usage         string
	insert        string
	takeOver      string
	mark          string
	overMark      string
	unmark        string
	deleteExpired string
}

// quoteTable quotes a validated table name, keeping a schema qualifier apart.
func quoteTable(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// indexName is the name of the expires_at index (created in the table's schema).
func indexName(name string) string {
	_, table, ok := strings.Cut(name, ".")
	if !ok {
		table = name
	}
	return pgx.Identifier{table + "_expires_at_idx"}.Sanitize()
}

// qualifiedIndexName is indexName with the table's schema, if it has one.
func qualifiedIndexName(name string) string {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		return indexName(name)
	}
	return pgx.Identifier{schema, table + "_expires_at_idx"}.Sanitize()
}

// newStatements builds the statements of a Store on table whose claims set
// idleInTx and statement (0: the session's own setting) for their transaction.
func newStatements(table string, idleInTx, statement time.Duration) statements {
	t := quoteTable(table)
	return statements{
		table: t,
		// CREATE INDEX takes a SHARE lock on the table before it sees that the
		// index exists, and would wait for every claim in progress: Migrate runs
		// it only when the index is missing (index), so an instance starts while
		// others serve slow handlers. CREATE TABLE IF NOT EXISTS locks nothing
		// when the table exists. This package writes a row only with its
		// response ('done'); 'claimed' is what earlier versions, which inserted
		// the row at the claim and updated it at the record, wrote first.
		// Versions before this one also checked state with a CHECK
		// constraint, which PostgreSQL reparses at every INSERT (a tenth of
		// what a request costs it): Migrate drops it (stateCheck).
		migrate: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    fingerprint   text        NOT NULL,
    owner_token   text        NOT NULL,
    state         text        NOT NULL,
    status        integer,
    header_names  bytea[],
    header_values bytea[],
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
)`, t),
		index:        qualifiedIndexName(table),
		migrateIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (expires_at)`, t, indexName(table)),

		tryLock:     tryLock(idleInTx, statement),
		tryLockCols: 1 + settings(idleInTx, statement),

		// $1 scope, $2 key: the key's record, live or expired, if any. The
		// second statement of a claim, pipelined after tryLock: a
		// statement of its own so that its snapshot is taken once the key's
		// lock is held, and shows the record of any owner that held it before.
		read: fmt.Sprintf(`SELECT expires_at > clock_timestamp(), fingerprint, owner_token, state, status, header_names, header_values, body
FROM %[1]s WHERE scope = $1 AND key = $2`, t),

		// $1 claim mark of the duplicate: true if no claim with this fingerprint is
		// in progress. Run outside a transaction, the shared lock is released at once.
		// The second column is how long, in seconds, the holder of the mark (the
		// owner of the claim) has been in its transaction, which began with the
		// claim; NULL if no one holds it or its session is not visible to this user
		// (pg_stat_activity hides other users' xact_start without pg_read_all_stats).
		probeOwner: `SELECT pg_try_advisory_xact_lock_shared($1),
       (SELECT extract(epoch FROM clock_timestamp() - a.xact_start)::float8
          FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.mode = 'ExclusiveLock' AND l.granted
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND l.classid = (($1::bigint >> 32) & 4294967295)::oid
           AND l.objid = ($1::bigint & 4294967295)::oid AND l.objsubid = 1
         LIMIT 1)`,

		// $1 scope: the scope's live records and what they take in the
		// table (pg_column_size of each row), by the primary key's index.
		// Pipelined after a claim's read when the process's count of the
		// scope is due (see countDue).
		usage: fmt.Sprintf(`SELECT count(*), coalesce(sum(pg_column_size(k.*)), 0)::bigint
FROM %[1]s AS k WHERE scope = $1 AND expires_at > clock_timestamp()`, t),

		// $1 scope, $2 key: the live committed record, if any.
		readLive: fmt.Sprintf(`SELECT fingerprint, owner_token, state, status, header_names, header_values, body
FROM %[1]s WHERE scope = $1 AND key = $2 AND expires_at > clock_timestamp()`, t),

		// $1 scope, $2 key, $3 fingerprint, $4 owner token, $5 status, $6 header
		// names, $7 header values, $8 body, $9 TTL (an interval). The record,
		// written once the handler has answered, when the claim found no row
		// for the key. It is pipelined with COMMIT, which PostgreSQL skips only
		// if this statement fails, so it fails whenever it must not commit: a
		// row of the key in the way (a unique violation), or a transaction that
		// is not the claim's (the owner token kept by tryLock is gone when the
		// handler rolled back, even if it began another transaction): the CASE
		// then gives owner_token NULL, which its NOT NULL constraint refuses
		// (SQLSTATE 23502, which recordAndCommit reports as such: notClaims).
		// A CASE without ELSE costs PostgreSQL 4,000 instructions a record
		// less than one whose ELSE raised the error itself (a failing cast of
		// a message), and the interval parameter 3,000 less than a product of
		// microseconds (bench/README.md, issue 30). The record expires TTL
		// after it is written; created_at is the transaction's start, the claim.
		insert: fmt.Sprintf(`INSERT INTO %[1]s (scope, key, fingerprint, owner_token, state, status,
                  header_names, header_values, body, created_at, expires_at)
VALUES ($1, $2, $3,
        CASE WHEN current_setting('idem.owner', true) = $4 THEN $4 END,
        'done', $5, $6, $7, $8, now(), clock_timestamp() + $9::interval)`, t),

		// The same, when the claim found an expired record: it overwrites it
		// if it is still expired, inserts if the reaper has deleted it in the
		// meantime, and fails otherwise (a live record in the way).
		takeOver: fmt.Sprintf(`WITH written AS (
    INSERT INTO %[1]s AS k (scope, key, fingerprint, owner_token, state, status,
                            header_names, header_values, body, created_at, expires_at)
    VALUES ($1, $2, $3,
            CASE WHEN current_setting('idem.owner', true) = $4 THEN $4 END,
            'done', $5, $6, $7, $8, now(), clock_timestamp() + $9::interval)
    ON CONFLICT (scope, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, owner_token = EXCLUDED.owner_token, state = EXCLUDED.state,
           status = EXCLUDED.status, header_names = EXCLUDED.header_names, header_values = EXCLUDED.header_values,
           body = EXCLUDED.body, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
     WHERE k.expires_at <= clock_timestamp()
    RETURNING 1)
SELECT CASE count(*) WHEN 1 THEN 1
       ELSE ('pgstore: a live record is in the way, rows written: ' || count(*))::int END
  FROM written`, t),

		// $1 scope, $2 key, $3 fingerprint, $4 owner token, $5 TTL in
		// microseconds, $6 the key's lock. The durable effect mark
		// (server.BeginEffect): a row in state 'claimed', committed at once
		// on a connection of its own, which the claim's transaction cannot
		// do before the record. It is written only while a transaction holds
		// the key's lock (the shared try-lock fails), so a claim already gone
		// (its session ended) leaves no mark and BeginEffect fails; and only
		// where no live row is (over an expired one, as takeOver). It returns
		// whether the key's lock was held and how many rows it wrote (1, or
		// 0: the lock was free, or a live row is in the way).
		mark: fmt.Sprintf(`WITH claim AS (SELECT NOT pg_try_advisory_xact_lock_shared($6) AS held),
written AS (
    INSERT INTO %[1]s AS k (scope, key, fingerprint, owner_token, state, created_at, expires_at)
    SELECT $1, $2, $3, $4, 'claimed', clock_timestamp(), clock_timestamp() + $5::bigint * interval '1 microsecond'
      FROM claim WHERE held
    ON CONFLICT (scope, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, owner_token = EXCLUDED.owner_token, state = EXCLUDED.state,
           status = NULL, header_names = NULL, header_values = NULL, body = NULL,
           created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
     WHERE k.expires_at <= clock_timestamp()
    RETURNING 1)
SELECT (SELECT held FROM claim), (SELECT count(*) FROM written)`, t),

		// The record of a claim that marked its effect, with insert's
		// parameters: it replaces the claim's own mark (a compare-and-set
		// on the owner token, in state 'claimed'), or an expired row, or
		// inserts if the reaper deleted the mark, and fails otherwise.
		overMark: fmt.Sprintf(`WITH written AS (
    INSERT INTO %[1]s AS k (scope, key, fingerprint, owner_token, state, status,
                            header_names, header_values, body, created_at, expires_at)
    VALUES ($1, $2, $3,
            CASE WHEN current_setting('idem.owner', true) = $4 THEN $4 END,
            'done', $5, $6, $7, $8, now(), clock_timestamp() + $9::interval)
    ON CONFLICT (scope, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, owner_token = EXCLUDED.owner_token, state = EXCLUDED.state,
           status = EXCLUDED.status, header_names = EXCLUDED.header_names, header_values = EXCLUDED.header_values,
           body = EXCLUDED.body, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
     WHERE (k.owner_token = EXCLUDED.owner_token AND k.state = 'claimed') OR k.expires_at <= clock_timestamp()
    RETURNING 1)
SELECT CASE count(*) WHEN 1 THEN 1
       ELSE ('pgstore: another live row is where the effect mark was, rows written: ' || count(*))::int END
  FROM written`, t),

		// $1 scope, $2 key, $3 owner token: a release clears the claim's
		// own mark (server.CancelEffect, then a 5xx), before the claim's
		// transaction rolls back, so that no one sees the mark without its
		// owner.
		unmark: fmt.Sprintf(`DELETE FROM %[1]s WHERE scope = $1 AND key = $2 AND owner_token = $3 AND state = 'claimed'`, t),

		// $1 batch size. SKIP LOCKED leaves alone an expired row that a record
		// is being written over right now (takeOver). A row that a claim will
		// take over later may be deleted first: takeOver then inserts.
		deleteExpired: fmt.Sprintf(`DELETE FROM %[1]s
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE expires_at <= clock_timestamp()
                         LIMIT $1 FOR UPDATE SKIP LOCKED))`, t),
	}
}

// tryLock is the first statement of a claim, which never waits: $1 key lock,
// $2 claim mark, $3 owner token. It takes the key's lock (an advisory lock of
// the transaction, keyed by a hash of table, scope and key) if it is free,
// then the claim mark (keyed by the fingerprint too, by which a duplicate that
// cannot wait learns whether the request in progress has its fingerprint:
// probeOwner), and keeps the owner token in a transaction-local setting for
// insert. A CASE evaluates its WHEN clauses in order and stops at the first
// true one. false: another transaction holds the key (or an earlier version's
// claim holds the mark); it may still be a replay's, which read then finds.
//
// The same statement sets, for the claim's transaction, the timeouts the
// Store is configured with (WithIdleInTxTimeout, WithStatementTimeout; a zero
// one is left out, keeping the session's setting): the claim's transaction
// ends if it waits longer than idleInTx for a statement, and each of its
// later statements is cancelled after statement. They are constants of the
// Store, written into the statement, which is prepared once per connection.
func tryLock(idleInTx, statement time.Duration) string {
	q := `SELECT CASE WHEN NOT pg_try_advisory_xact_lock($1) THEN false
            WHEN NOT pg_try_advisory_xact_lock($2) THEN false
            ELSE set_config('idem.owner', $3, true) IS NOT NULL END`
	for _, s := range []struct {
		name string
		d    time.Duration
	}{{"idle_in_transaction_session_timeout", idleInTx}, {"statement_timeout", statement}} {
		if s.d > 0 {
			q += fmt.Sprintf(",\n       set_config('%s', '%s', true)", s.name, millis(s.d))
		}
	}
	return q
}

// settings is how many timeouts tryLock sets.
func settings(idleInTx, statement time.Duration) int {
	n := 0
	for _, d := range []time.Duration{idleInTx, statement} {
		if d > 0 {
			n++
		}
	}
	return n
}

// millis is d in whole milliseconds, at least 1, for a setting.
func millis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}
