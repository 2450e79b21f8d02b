package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/server/pgstore"
)

func TestNewRejectsBadTables(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "Payments", "pay-ments", `p"; DROP TABLE x; --`, "1p", "a.b"} {
		if _, err := pgledger.New(nil, name); !errors.Is(err, pgledger.ErrInvalidTable) {
			t.Errorf("New(%q) = %v; want ErrInvalidTable", name, err)
		}
	}
}

func TestLedger(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	l, err := pgledger.New(pool, testTable(t, pool, "pay_test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC)
	ps := []payments.Payment{
		{ID: "p1", Customer: "a", Amount: 100, Currency: "EUR", Created: at},
		{ID: "p2", Customer: "b", Amount: 200, Currency: "USD", Created: at.Add(time.Second), Owner: "bearer:x"},
		{ID: "p3", Customer: "a", Amount: 300, Currency: "EUR", Created: at.Add(2 * time.Second)},
	}
	for _, p := range ps {
		if err := l.Insert(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// A write through a transaction in the context is undone with it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Insert(pgstore.ContextWithTx(ctx, tx), payments.Payment{ID: "p4", Customer: "a", Amount: 1, Currency: "EUR", Created: at}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.List(pgstore.ContextWithTx(ctx, tx), "a"); len(got) != 3 {
		t.Fatalf("inside the transaction: %d payments of a; want 3", len(got))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Insert(ctx, ps[0]); err == nil {
		t.Fatal("duplicate payment id accepted")
	}

	tests := []struct {
		customer string
		want     []payments.Payment
	}{
		{"", ps},
		{"a", []payments.Payment{ps[0], ps[2]}},
		{"b", ps[1:2]},
		{"nobody", []payments.Payment{}},
	}
	for _, tt := range tests {
		got, err := l.List(ctx, tt.customer)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil {
			got = []payments.Payment{}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("List(%q) = %+v; want %+v", tt.customer, got, tt.want)
		}
		if n, err := l.Count(ctx, tt.customer); err != nil || n != len(tt.want) {
			t.Errorf("Count(%q) = %d, %v; want %d", tt.customer, n, err, len(tt.want))
		}
	}
}

// TestMigrateBesideAWriter: an instance that starts while a transaction writes
// to the table (a slow handler) migrates at once, without a lock that would
// queue every reader of the table behind that transaction.
func TestMigrateBesideAWriter(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	table := testTable(t, pool, "pay_mig")
	ctx := context.Background()
	l, err := pgledger.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Insert(ctx, payments.Payment{ID: "p1", Customer: "a", Amount: 1, Currency: "EUR", Created: time.Now(), Owner: "o"}); err != nil {
		t.Fatalf("insert: %v", err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := l.Insert(pgstore.ContextWithTx(ctx, tx), payments.Payment{ID: "p2", Customer: "a", Amount: 1, Currency: "EUR", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The guard only bounds a failing run: a Migrate that waits for the
	// writer would wait until it ends, which is after this call.
	guard, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.Migrate(guard); err != nil {
		t.Fatalf("Migrate beside a writer: %v", err)
	}
}

// TestMigrateLeavesAForeignTableAlone: a table of the ledger's name that
// someone else made (another shape) is refused with an error naming it and
// the fix, and left exactly as it was: columns, rows, no new column.
func TestMigrateLeavesAForeignTableAlone(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	ctx := context.Background()
	for _, tc := range []struct {
		name, ddl string
		diff      string
	}{
		{"a user's payments", `(id serial PRIMARY KEY, amount numeric(12,2), paid_at timestamptz)`, "missing column customer"},
		{"an older ledger", `(seq bigint GENERATED ALWAYS AS IDENTITY, id text PRIMARY KEY, customer text NOT NULL,
 amount bigint NOT NULL, currency text NOT NULL, created timestamptz NOT NULL)`, "missing column owner"},
		{"one more column", `(seq bigint GENERATED ALWAYS AS IDENTITY, id text PRIMARY KEY, customer text NOT NULL,
 amount bigint NOT NULL, currency text NOT NULL, created timestamptz NOT NULL, owner text NOT NULL DEFAULT '', note text)`,
			"extra column note"},
		{"another type", `(seq bigint GENERATED ALWAYS AS IDENTITY, id text PRIMARY KEY, customer text NOT NULL,
 amount numeric NOT NULL, currency text NOT NULL, created timestamptz NOT NULL, owner text NOT NULL DEFAULT '')`,
			"column amount is numeric, not bigint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := testTable(t, pool, "payments_foreign")
			if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` `+tc.ddl); err != nil {
				t.Fatal(err)
			}
			before := describe(t, pool, table)
			l, err := pgledger.New(pool, table)
			if err != nil {
				t.Fatal(err)
			}
			err = l.Migrate(ctx)
			var shape *pgledger.ShapeError
			if !errors.Is(err, pgledger.ErrForeignTable) || !errors.As(err, &shape) || shape.Table != table {
				t.Fatalf("Migrate: %v, want a ShapeError for %s", err, table)
			}
			for _, want := range []string{table, tc.diff, "search_path"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if after := describe(t, pool, table); after != before {
				t.Errorf("the table changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// describe returns table's columns and row count as one line.
func describe(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var cols string
	var rows int
	err := pool.QueryRow(context.Background(), `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum),
 (SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+`) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`,
		table).Scan(&cols, &rows)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s (%d rows)", cols, rows)
}

// TestLedgerPage: Page lists one owner's payments a page at a time, oldest
// first, with the count of all of them, as the API's GET /payments pages them.
func TestLedgerPage(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 4)
	l, err := pgledger.New(pool, testTable(t, pool, "pay_page"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 7 {
		owner, customer := "o", "a"
		if i == 3 {
			owner = "x" // another owner's: never listed to o
		}
		if i%2 == 1 {
			customer = "b"
		}
		p := payments.Payment{ID: fmt.Sprintf("p%d", i), Customer: customer, Amount: 1, Currency: "EUR", Created: at, Owner: owner}
		if err := l.Insert(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	q := payments.Query{Owner: "o", Limit: 2}
	for {
		pg, err := l.Page(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if pg.Total != 6 || len(pg.Payments) > 2 {
			t.Fatalf("Page(%+v): total %d, %d payments; want 6 and at most 2", q, pg.Total, len(pg.Payments))
		}
		for _, p := range pg.Payments {
			ids = append(ids, p.ID)
		}
		if !pg.More {
			break
		}
		q.After = pg.Payments[len(pg.Payments)-1].Seq
	}
	if got := strings.Join(ids, ","); got != "p0,p1,p2,p4,p5,p6" {
		t.Errorf("pages listed %s, want p0,p1,p2,p4,p5,p6", got)
	}
	pg, err := l.Page(ctx, payments.Query{Owner: "o", Customer: "b", Limit: 10})
	if err != nil || pg.Total != 2 || len(pg.Payments) != 2 || pg.More || pg.Payments[0].ID != "p1" || pg.Payments[1].ID != "p5" {
		t.Errorf("customer b's page = %+v, %v; want p1 and p5, total 2", pg, err)
	}
}
