// Package pgledger is the demo's payments.Ledger in PostgreSQL, whose Insert
// joins the pgstore transaction of the request, so a payment commits if and
// only if its idempotency record does. It is a module of its own (it needs pgx)
// under internal/, like the rest of the demo: no library user imports it.
//
//	store := pgstore.New(pool)
//	ledger, _ := pgledger.New(pool, "idem_demo_payments")
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
	"strings"

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
	pool  *pgxpool.Pool
	table string // as given to New
	name  string // quoted
	ins   string
	list  string
	page  string
	total string
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
		pool:  pool,
		table: table,
		name:  t,
		ins:   "INSERT INTO " + t + " (id, customer, amount, currency, created, owner) VALUES ($1, $2, $3, $4, $5, $6)",
		list: "SELECT id, customer, amount, currency, created, owner FROM " + t +
			" WHERE $1 = '' OR customer = $1 ORDER BY seq",
		page: "SELECT id, customer, amount, currency, created, owner, seq FROM " + t +
			" WHERE owner = $1 AND ($2 = '' OR customer = $2) AND seq > $3 ORDER BY seq LIMIT $4",
		total: "SELECT count(*) FROM " + t + " WHERE owner = $1 AND ($2 = '' OR customer = $2)",
	}, nil
}

// Migrate creates the table when it does not exist:
//
//	CREATE TABLE <table> (
//	    seq      bigint GENERATED ALWAYS AS IDENTITY,
//	    id       text PRIMARY KEY,
//	    customer text NOT NULL,
//	    amount   bigint NOT NULL,
//	    currency text NOT NULL,
//	    created  timestamptz NOT NULL,
//	    owner    text NOT NULL DEFAULT ''
//	)
//
// A table of that name that exists already is never changed: when its columns
// are these (names, types, NOT NULL), Migrate takes it as the ledger's own;
// otherwise it returns a *ShapeError (wrapping ErrForeignTable) that names the
// table, what differs and how to fix it. Migrate takes no lock that a
// transaction writing to an existing table holds.
func (l *Ledger) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "idem-migrate:"+l.name); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, l.name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return l.checkShape(ctx, tx)
		}
		_, err := tx.Exec(ctx, `CREATE TABLE `+l.name+` (
    seq      bigint GENERATED ALWAYS AS IDENTITY,
    id       text PRIMARY KEY,
    customer text NOT NULL,
    amount   bigint NOT NULL,
    currency text NOT NULL,
    created  timestamptz NOT NULL,
    owner    text NOT NULL DEFAULT ''
)`)
		return err
	})
	var shape *ShapeError
	if err != nil && !errors.As(err, &shape) {
		return fmt.Errorf("pgledger: migrate: %w", err)
	}
	return err
}

// column is one column of the ledger's table as PostgreSQL describes it.
type column struct {
	name, typ string
	notNull   bool
}

// shape is the ledger table's columns, in order.
var shape = []column{
	{"seq", "bigint", true}, {"id", "text", true}, {"customer", "text", true}, {"amount", "bigint", true},
	{"currency", "text", true}, {"created", "timestamp with time zone", true}, {"owner", "text", true},
}

// ErrForeignTable is wrapped by Migrate's error when the table exists with
// columns other than the ledger's: it is not the ledger's, and is left alone.
var ErrForeignTable = errors.New("pgledger: the table exists with another shape")

// ShapeError is Migrate's error for a table that exists with another shape.
type ShapeError struct {
	Table string   // the table, as named to New
	Diffs []string // what differs, one line each ("missing column owner", ...)
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("pgledger: table %s exists with another shape (%s): it was not created by this ledger, "+
		"which leaves it unchanged; use a database or schema of its own (for example ?search_path=idem_demo "+
		"in the connection URL), or drop the table if it is an old ledger's",
		e.Table, strings.Join(e.Diffs, "; "))
}

func (e *ShapeError) Unwrap() error { return ErrForeignTable }

// checkShape compares the existing table's columns with the ledger's.
func (l *Ledger) checkShape(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, l.name)
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.typ, &c.notNull)
		return c, err
	})
	if err != nil {
		return err
	}
	if diffs := shapeDiffs(have); len(diffs) > 0 {
		return &ShapeError{Table: l.table, Diffs: diffs}
	}
	return nil
}

// shapeDiffs lists how have differs from the ledger's shape.
func shapeDiffs(have []column) []string {
	var diffs []string
	byName := map[string]column{}
	for _, c := range have {
		byName[c.name] = c
	}
	for _, w := range shape {
		c, ok := byName[w.name]
		switch {
		case !ok:
			diffs = append(diffs, "missing column "+w.name)
		case c.typ != w.typ:
			diffs = append(diffs, fmt.Sprintf("column %s is %s, not %s", w.name, c.typ, w.typ))
		case c.notNull != w.notNull:
			diffs = append(diffs, fmt.Sprintf("column %s allows NULL", w.name))
		}
		delete(byName, w.name)
	}
	for _, c := range have {
		if _, extra := byName[c.name]; extra {
			diffs = append(diffs, "extra column "+c.name)
		}
	}
	return diffs
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

// Page returns the page q asks for: the owner's payments (of q.Customer when
// not empty) with a seq past q.After, oldest first, at most q.Limit, and how
// many of the owner's (and customer's) payments there are in all. Both
// statements run in the request's pgstore transaction when ctx has one.
func (l *Ledger) Page(ctx context.Context, q payments.Query) (payments.Page, error) {
	var db interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
		QueryRow(context.Context, string, ...any) pgx.Row
	} = l.pool
	if tx := pgstore.Tx(ctx); tx != nil {
		db = tx
	}
	rows, err := db.Query(ctx, l.page, q.Owner, q.Customer, q.After, q.Limit+1)
	if err != nil {
		return payments.Page{}, fmt.Errorf("pgledger: page: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (payments.Payment, error) {
		var p payments.Payment
		err := r.Scan(&p.ID, &p.Customer, &p.Amount, &p.Currency, &p.Created, &p.Owner, &p.Seq)
		p.Created = p.Created.UTC()
		return p, err
	})
	if err != nil {
		return payments.Page{}, fmt.Errorf("pgledger: page: %w", err)
	}
	pg := payments.Page{Payments: ps}
	if len(ps) > q.Limit {
		pg.Payments, pg.More = ps[:q.Limit], true
	}
	if err := db.QueryRow(ctx, l.total, q.Owner, q.Customer).Scan(&pg.Total); err != nil {
		return payments.Page{}, fmt.Errorf("pgledger: page: %w", err)
	}
	return pg, nil
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
