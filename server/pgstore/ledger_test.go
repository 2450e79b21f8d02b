package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server/pgstore"
)

// ledger is the tests' business table: a handler's payments, written through
// the request's pgstore transaction (pgstore.Tx), so that a payment commits if
// and only if its idempotency record does. It is what an application of the
// store writes, in a few lines, so the tests need no demo.
type ledger struct {
	pool  *pgxpool.Pool
	table string // quoted
}

// payment is one row of a ledger.
type payment struct {
	ID       string    `json:"id"`
	Customer string    `json:"customer"`
	Amount   int64     `json:"amount"`
	Currency string    `json:"currency"`
	Created  time.Time `json:"created"`
}

func newLedger(pool *pgxpool.Pool, table string) *ledger {
	return &ledger{pool: pool, table: pgx.Identifier{table}.Sanitize()}
}

// migrate creates the table if it does not exist, under an advisory lock so that
// concurrent calls all succeed.
func (l *ledger) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "pgstore-test-ledger:"+l.table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+l.table+` (
    id       text PRIMARY KEY,
    customer text NOT NULL,
    amount   bigint NOT NULL,
    currency text NOT NULL,
    created  timestamptz NOT NULL
)`)
		return err
	})
}

// insert writes p in the request's pgstore transaction when ctx has one, on the
// pool otherwise.
func (l *ledger) insert(ctx context.Context, p payment) error {
	const cols = " (id, customer, amount, currency, created) VALUES ($1, $2, $3, $4, $5)"
	var err error
	if tx := pgstore.Tx(ctx); tx != nil {
		_, err = tx.Exec(ctx, "INSERT INTO "+l.table+cols, p.ID, p.Customer, p.Amount, p.Currency, p.Created)
	} else {
		_, err = l.pool.Exec(ctx, "INSERT INTO "+l.table+cols, p.ID, p.Customer, p.Amount, p.Currency, p.Created)
	}
	if err != nil {
		return fmt.Errorf("ledger insert: %w", err)
	}
	return nil
}

// count returns how many committed payments customer has (all when customer is
// empty).
func (l *ledger) count(ctx context.Context, customer string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, "SELECT count(*) FROM "+l.table+" WHERE $1 = '' OR customer = $1", customer).Scan(&n)
	return n, err
}

// create handles POST /payments, {"customer","amount","currency"}: it writes a
// payment with a new id and answers 201 with it and its Location, 400 for a body
// it cannot read, 503 when the write fails.
func (l *ledger) create(w http.ResponseWriter, r *http.Request) {
	var p payment
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.ID, p.Created = "pay_"+rand.Text(), time.Now().UTC()
	if err := l.insert(r.Context(), p); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	body, _ := json.Marshal(p) // a payment always marshals
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+p.ID)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(body, '\n'))
}
