// Package pgledger is the demo's payments.Ledger in PostgreSQL, whose Insert
// joins the pgstore transaction of the request, so a payment commits if and
// only if its idempotency record does. It is a module of its own (it needs pgx)
// under internal/, like the rest of the demo: no library user imports it.
//
//	store := pgstore.New(pool)
//	ledger, _ := pgledger.New(pool, "payments")
//	_ = store.Migrate(ctx)
//	_ = ledger.Migrate(ctx)
//	api := &payments.API{Ledger: ledger}
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
//	mux.HandleFunc("GET /payments", api.List)
package pgledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server/pgstore"
)

// ErrInvalidTable is returned by New for a table name that is not a plain
// lower-case SQL identifier.
var ErrInvalidTable = errors.New("pgledger: invalid table name")

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Ledger is a payments.Ledger backed by one table. Insert and List run in the
// request's pgstore transaction when there is one (pgstore.Tx), on the pool
// otherwise.
type Ledger struct {
	pool *pgxpool.Pool
	name string
	ins  string
	list string
}

var _ payments.Ledger = (*Ledger)(nil)

// New returns a Ledger on table, a plain lower-case SQL identifier. Call Migrate
// to create the table.
func New(pool *pgxpool.Pool, table string) (*Ledger, error) {
	if pool == nil || !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidTable, table)
	}
	t := pgx.Identifier{table}.Sanitize()
	return &Ledger{
		pool: pool,
		name: t,
		ins:  "INSERT INTO " + t + " (id, customer, amount, currency, created, owner) VALUES ($1, $2, $3, $4, $5, $6)",
		list: "SELECT id, customer, amount, currency, created, owner FROM " + t +
			" WHERE $1 = '' OR customer = $1 ORDER BY seq",
	}, nil
}

// Migrate creates the table if it does not exist:
//
//	CREATE TABLE IF NOT EXISTS <table> (
//	    seq      bigint GENERATED ALWAYS AS IDENTITY,
//	    id       text PRIMARY KEY,
//	    customer text NOT NULL,
//	    amount   bigint NOT NULL,
//	    currency text NOT NULL,
//	    created  timestamptz NOT NULL,
//	    owner    text NOT NULL DEFAULT ''
//	)
//
// and adds the owner column to a table an earlier version created.
func (l *Ledger) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "idem-migrate:"+l.name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+l.name+` (
    seq      bigint GENERATED ALWAYS AS IDENTITY,
    id       text PRIMARY KEY,
    customer text NOT NULL,
    amount   bigint NOT NULL,
    currency text NOT NULL,
    created  timestamptz NOT NULL,
    owner    text NOT NULL DEFAULT ''
)`)
		if err != nil {
			return err
		}
		// ALTER TABLE takes the table's ACCESS EXCLUSIVE lock even when the
		// column exists, and waits for every transaction writing to it: an
		// instance starting beside slow handlers would block all reads of the
		// table behind that wait. Only a table without the column is altered.
		var has bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
 WHERE attrelid = to_regclass($1) AND attname = 'owner' AND NOT attisdropped)`, l.name).Scan(&has); err != nil || has {
			return err
		}
		_, err = tx.Exec(ctx, `ALTER TABLE `+l.name+` ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT ''`)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgledger: migrate: %w", err)
	}
	return nil
}

// Insert writes p, inside the request's pgstore transaction when ctx has one.
func (l *Ledger) Insert(ctx context.Context, p payments.Payment) error {
	var err error
	if tx := pgstore.Tx(ctx); tx != nil {
		_, err = tx.Exec(ctx, l.ins, p.ID, p.Customer, p.Amount, p.Currency, p.Created, p.Owner)
	} else {
		_, err = l.pool.Exec(ctx, l.ins, p.ID, p.Customer, p.Amount, p.Currency, p.Created, p.Owner)
	}
	if err != nil {
		return fmt.Errorf("pgledger: insert: %w", err)
	}
	return nil
}

// List returns the payments of customer (all when customer is empty), oldest
// first, with Created in UTC at PostgreSQL's microsecond precision.
func (l *Ledger) List(ctx context.Context, customer string) ([]payments.Payment, error) {
	var rows pgx.Rows
	var err error
	if tx := pgstore.Tx(ctx); tx != nil {
		rows, err = tx.Query(ctx, l.list, customer)
	} else {
		rows, err = l.pool.Query(ctx, l.list, customer)
	}
	if err != nil {
		return nil, fmt.Errorf("pgledger: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (payments.Payment, error) {
		var p payments.Payment
		err := r.Scan(&p.ID, &p.Customer, &p.Amount, &p.Currency, &p.Created, &p.Owner)
		p.Created = p.Created.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgledger: list: %w", err)
	}
	return out, nil
}

// Count returns how many payments customer has (all when customer is empty).
func (l *Ledger) Count(ctx context.Context, customer string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, "SELECT count(*) FROM "+l.name+" WHERE $1 = '' OR customer = $1", customer).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgledger: count: %w", err)
	}
	return n, nil
}
