package pgstore

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statements holds the SQL of one Store, built once for its table.
type statements struct {
	migrate       string
	index         string // the expires_at index, schema-qualified, quoted
	migrateIndex  string
	claim         string
	probeOwner    string
	readLive      string
	record        string
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

func newStatements(table string) statements {
	t := quoteTable(table)
	return statements{
		// CREATE INDEX takes a SHARE lock on the table before it sees that the
		// index exists, and would wait for every claim in progress: Migrate runs
		// it only when the index is missing (index), so an instance starts while
		// others serve slow handlers. CREATE TABLE IF NOT EXISTS locks nothing
		// when the table exists.
		migrate: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    fingerprint   text        NOT NULL,
    owner_token   text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('claimed', 'done')),
    status        integer,
    header_names  bytea[],
    header_values bytea[],
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
) WITH (fillfactor = 80)`, t),
		index:        qualifiedIndexName(table),
		migrateIndex: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (expires_at)`, t, indexName(table)),

		// $1 scope, $2 key, $3 fingerprint, $4 owner token, $5 TTL in microseconds,
		// $6 claim mark, $7 lock_timeout of the claim in milliseconds. One
		// statement claims the key or reads the record that stops the claim.
		//
		// The INSERT's row source first saves the session's lock_timeout in a
		// transaction-local setting and sets the claim's (the inner set_config
		// runs before the outer: an argument is evaluated before its call). The NOT
		// EXISTS keeps replays of a committed record from locking it; a duplicate
		// of a request still in progress waits on the uncommitted row in ON
		// CONFLICT, for lock_timeout at most (then SQLSTATE 55P03). RETURNING is
		// evaluated only for the row this statement claimed, after any wait: only
		// the holder of the claim takes the mark, an advisory lock visible to
		// other sessions at once whose key hashes (table, scope, key, fingerprint),
		// by which a duplicate that timed out on the row lock learns whether the
		// request in progress has its fingerprint (probeOwner); and it puts back
		// the session's lock_timeout, so the handler's statements run with the
		// lock_timeout they would have had without idem. A claim that does not
		// hold the row is rolled back, setting and all.
		//
		// The first column says which: true, the claim (its own row); false,
		// the live record that stopped it, as the statement's snapshot sees it. No
		// row: the claim met a row that the snapshot, taken before any wait, does
		// not show (an owner that committed while this statement waited, or a
		// record committed just before the insert); Do claims again, with a new
		// snapshot.
		claim: fmt.Sprintf(`WITH claimed AS (
    INSERT INTO %[1]s AS k (scope, key, fingerprint, owner_token, state, created_at, expires_at)
    SELECT $1, $2, $3, $4, 'claimed', clock_timestamp(), clock_timestamp() + $5::bigint * interval '1 microsecond'
     WHERE set_config('lock_timeout',
                      $7::text || left(set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true), 0),
                      true) IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM %[1]s WHERE scope = $1 AND key = $2 AND expires_at > clock_timestamp())
    ON CONFLICT (scope, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, owner_token = EXCLUDED.owner_token, state = 'claimed',
           status = NULL, header_names = NULL, header_values = NULL, body = NULL,
           created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
     WHERE k.expires_at <= clock_timestamp()
    RETURNING k.owner_token, k.fingerprint, k.state, pg_advisory_xact_lock($6),
              set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true))
SELECT true, owner_token, fingerprint, state, NULL::integer, NULL::bytea[], NULL::bytea[], NULL::bytea
  FROM claimed
UNION ALL
SELECT false, owner_token, fingerprint, state, status, header_names, header_values, body
  FROM %[1]s
 WHERE scope = $1 AND key = $2 AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM claimed)`, t),

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

		// $1 scope, $2 key: the live committed record, if any.
		readLive: fmt.Sprintf(`SELECT fingerprint, owner_token, state, status, header_names, header_values, body
FROM %[1]s WHERE scope = $1 AND key = $2 AND expires_at > clock_timestamp()`, t),

		// $1 scope, $2 key, $3 owner token, $4 status, $5 header names, $6 header
		// values, $7 body, $8 TTL in microseconds. Compare-and-set on the owner
		// token. The record expires TTL after it is written, not after the claim, so
		// a handler slower than the TTL still leaves a record to replay; to within
		// the smaller of 1s and a tenth of the TTL, which keeps expires_at (an
		// indexed column) unchanged for a quick handler, so that PostgreSQL can
		// update the row in place (HOT) with no new index entries. It is
		// pipelined with COMMIT, which PostgreSQL skips only if this statement
		// fails, so a compare-and-set that matches no row must fail: the cast of a
		// text that is not a number does, at run time (the subquery keeps the
		// planner from evaluating it early), with a message that says why.
		record: fmt.Sprintf(`WITH done AS (
    UPDATE %[1]s
       SET state = 'done', status = $4, header_names = $5, header_values = $6, body = $7,
           expires_at = CASE
               WHEN clock_timestamp() + $8::bigint * interval '1 microsecond' - expires_at
                    > least(interval '1 second', $8::bigint / 10 * interval '1 microsecond')
               THEN clock_timestamp() + $8::bigint * interval '1 microsecond'
               ELSE expires_at END
     WHERE scope = $1 AND key = $2 AND owner_token = $3 AND state = 'claimed'
    RETURNING 1)
SELECT CASE WHEN (SELECT count(*) FROM done) = 1 THEN 1
            ELSE ('pgstore: claim lost, rows updated: ' || (SELECT count(*) FROM done))::int END`, t),

		// $1 batch size. SKIP LOCKED leaves alone an expired row that a claim is
		// taking over right now.
		deleteExpired: fmt.Sprintf(`DELETE FROM %[1]s
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE expires_at <= clock_timestamp()
                         LIMIT $1 FOR UPDATE SKIP LOCKED))`, t),
	}
}
