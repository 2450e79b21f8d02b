package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// floorStore is section 5's floor for the PostgreSQL store: what any store
// that writes the response in the business write's transaction must do for a
// new key, and nothing more. It is not a store: it claims nothing, so two
// requests of one key at once both run the handler, and it knows which keys
// are new from a map of this process's (seen), where a store must ask the
// database. A new key is BEGIN, the handler's statements, then the record's
// INSERT pipelined with COMMIT: the same three round trips as the store's,
// and the same row in the same table (the store replays it:
// TestFloorWritesTheStoresRecord), without the store's claim (its lock, its
// owner token, its read). A replay is one SELECT of the record, outside a
// transaction.
//
// The gap between the baseline and the floor is the record's; the gap
// between the floor and the store is the claim's (bench/README.md, issue 30).
type floorStore struct {
	pool   *pgxpool.Pool
	table  string // the store's, unquoted
	insert string
	read   string
	seen   sync.Map // key → struct{}: the keys recorded
}

// floorOwner is what the floor writes as owner_token, where the store writes
// its claim's random token (26 characters, as rand.Text's).
const floorOwner = "FLOORFLOORFLOORFLOORFLOORF"

func newFloorStore(pool *pgxpool.Pool, table string) *floorStore {
	t := pgx.Identifier{table}.Sanitize()
	return &floorStore{
		pool:  pool,
		table: table,
		// The store's insert (server/pgstore, sql.go) without its check
		// that the owner token is the claim's, which the floor has no claim for.
		insert: `INSERT INTO ` + t + ` (scope, key, fingerprint, owner_token, state, status,
                  header_names, header_values, body, created_at, expires_at)
VALUES ($1, $2, $3, $4, 'done', $5, $6, $7, $8, now(), clock_timestamp() + $9::interval)`,
		read: `SELECT status, header_names, header_values, body FROM ` + t + ` WHERE scope = $1 AND key = $2`,
	}
}

// Do runs a new key's handler in a transaction and records its response
// there, or replays the key's record if this process recorded one.
func (f *floorStore) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	seen := req.Scope + "\x00" + req.Key
	if _, ok := f.seen.Load(seen); ok {
		return f.replay(ctx, req)
	}
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		return server.Result{}, fmt.Errorf("floor: %w", err)
	}
	// Release returns the connection to the pool if its transaction ended,
	// and closes it otherwise.
	defer conn.Release()
	tx, err := conn.Conn().Begin(ctx)
	if err != nil {
		return server.Result{}, fmt.Errorf("floor: begin: %w", err)
	}
	resp, keep := run(pgstore.ContextWithTx(ctx, tx))
	end := context.WithoutCancel(ctx)
	if !keep {
		if err := tx.Rollback(end); err != nil {
			return server.Result{}, fmt.Errorf("floor: rollback: %w", err)
		}
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	}
	names, values := flatHeader(resp.Header)
	b := &pgx.Batch{}
	b.Queue(f.insert, req.Scope, req.Key, req.Fingerprint, floorOwner, resp.Status, names, values, resp.Body, req.TTL)
	b.Queue("COMMIT")
	if err := conn.Conn().SendBatch(end, b).Close(); err != nil {
		return server.Result{}, fmt.Errorf("floor: record: %w", err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		return server.Result{}, fmt.Errorf("floor: transaction status %q after COMMIT", st)
	}
	f.seen.Store(seen, struct{}{})
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
}

// replay reads the record of req's key.
func (f *floorStore) replay(ctx context.Context, req server.Request) (server.Result, error) {
	var status int32
	var names, values [][]byte
	var body []byte
	if err := f.pool.QueryRow(ctx, f.read, req.Scope, req.Key).Scan(&status, &names, &values, &body); err != nil {
		return server.Result{}, fmt.Errorf("floor: replay: %w", err)
	}
	if len(names) != len(values) {
		return server.Result{}, errors.New("floor: replay: header arrays of different lengths")
	}
	h := make(http.Header, len(names))
	for i, n := range names {
		h[string(n)] = append(h[string(n)], string(values[i]))
	}
	return server.Result{Outcome: server.OutcomeReplayed, Response: &server.Response{Status: int(status), Header: h, Body: body}}, nil
}

// flatHeader is h as the store writes it: parallel arrays of names and
// values, one element per value, names sorted. (The store also keeps a name
// with no values, which the payments handler does not send.)
func flatHeader(h http.Header) (names, values [][]byte) {
	names, values = [][]byte{}, [][]byte{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			names, values = append(names, []byte(k)), append(values, []byte(v))
		}
	}
	return names, values
}
