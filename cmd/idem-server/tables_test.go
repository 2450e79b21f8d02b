package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
)

// demoSchema creates a schema of its own for one test, dropped at its end,
// and returns a URL whose search_path puts the server's tables there.
func demoSchema(t *testing.T) (url string, pool *pgxpool.Pool) {
	t.Helper()
	base := postgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := strings.ReplaceAll(unique("fw_demo"), "-", "_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema, pool
}

// describeTable returns a table's columns and rows as one line, "" when it
// does not exist; url's search_path says where.
func describeTable(t *testing.T, url, table string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || !exists {
		return ""
	}
	var cols, rows string
	err = conn.QueryRow(ctx, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, table).Scan(&cols)
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT coalesce(string_agg(t::text, ';' ORDER BY t::text), '') FROM "+
			pgx.Identifier{table}.Sanitize()+" t").Scan(&rows)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cols + " | " + rows
}

const userPayments = `CREATE TABLE payments (id serial PRIMARY KEY, amount numeric(12,2) NOT NULL, paid_at timestamptz NOT NULL);
INSERT INTO payments (amount, paid_at) VALUES (12.50, '2026-01-02T03:04:05Z'), (99.00, '2026-02-03T04:05:06Z')`

// A database that already has a payments table of its user's: the demo
// serves with tables of its own and leaves that one exactly as it was.
func TestRunLeavesAUsersPaymentsTableUnchanged(t *testing.T) {
	t.Parallel()
	url, _ := demoSchema(t)
	if _, err := pgxExec(url, userPayments); err != nil {
		t.Fatal(err)
	}
	before := describeTable(t, url, "payments")
	base, stop, logs := startRun(t, "-store", "postgres", "-postgres-url", url)
	customer, key := unique("cus"), unique("key")
	resp, body := doRequest(t, http.MethodPost, base+"/payments", key, `{"customer":"`+customer+`","amount":700,"currency":"EUR"}`, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /payments: %d %s; log:\n%s", resp.StatusCode, body, logs)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if after := describeTable(t, url, "payments"); after != before {
		t.Errorf("the user's payments table changed:\nbefore %s\nafter  %s", before, after)
	}
	for _, table := range []string{keysTable, paymentsTable} {
		if describeTable(t, url, table) == "" {
			t.Errorf("the demo's table %s was not created", table)
		}
	}
}

// A table of the demo's own name with another shape: the server refuses to
// start (status 1), naming the table and the fix, and changes nothing.
func TestRunRefusesATableOfAnotherShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args func(url string) []string
	}{
		{"postgres store", func(url string) []string { return []string{"-store", "postgres", "-postgres-url", url} }},
		{"memory store, PostgreSQL ledger", func(url string) []string { return []string{"-ledger-postgres-url", url} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, _ := demoSchema(t)
			foreign := strings.ReplaceAll(userPayments, "payments", paymentsTable)
			if _, err := pgxExec(url, foreign); err != nil {
				t.Fatal(err)
			}
			before := describeTable(t, url, paymentsTable)
			err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, tc.args(url)...), io.Discard, io.Discard)
			if !errors.Is(err, pgpayments.ErrForeignTable) || exitCode(err, io.Discard) != 1 {
				t.Fatalf("run: %v (exit %d), want the foreign table refused with status 1", err, exitCode(err, io.Discard))
			}
			for _, want := range []string{paymentsTable, "missing column customer", "search_path"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if after := describeTable(t, url, paymentsTable); after != before {
				t.Errorf("the table changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// A 503 whose cause is not in its body (the ledger failed) has the cause in
// the request's log line.
func TestRunLogsTheCauseOfA503(t *testing.T) {
	t.Parallel()
	url, _ := demoSchema(t)
	base, _, logs := startRun(t, "-ledger-postgres-url", url)
	if _, err := pgxExec(url, "DROP TABLE "+paymentsTable); err != nil {
		t.Fatal(err)
	}
	resp, body := doRequest(t, http.MethodPost, base+"/payments", unique("key"), `{"customer":"c","amount":1,"currency":"EUR"}`, nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST with the ledger gone: %d %s, want 503", resp.StatusCode, body)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"path":"/payments"`) && strings.Contains(l, `"status":503`) {
			line = l
		}
	}
	if !strings.Contains(line, `"level":"WARN"`) || !strings.Contains(line, `"cause":"pgledger: insert:`) ||
		!strings.Contains(line, "does not exist") {
		t.Errorf("the 503's log line %q does not give its cause; log:\n%s", line, logs)
	}
}

func pgxExec(url, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, sql)
	return tag.String(), err
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(context.Background(), []string{"-version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "idem-server ") || !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("-version printed %q", out.String())
	}
}

func TestFlagsOfAnotherStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "redis", "-postgres-url", "postgres://x"}, "-postgres-url belongs to -store postgres, not -store redis (to keep the payments in PostgreSQL, use -ledger-postgres-url)"},
		{[]string{"-postgres-url", "postgres://x"}, "-postgres-url belongs to -store postgres, not -store memory"},
		{[]string{"-store", "postgres", "-postgres-url", "postgres://x", "-redis-addr", "a:1"}, "-redis-addr belongs to -store redis, not -store postgres"},
		{[]string{"-store", "redis", "-max-entries", "5"}, "-max-entries belongs to -store memory, not -store redis"},
		{[]string{"-redis-min-replicas", "1"}, "-redis-min-replicas belongs to -store redis"},
		{[]string{"-store", "postgres", "-postgres-url", "postgres://x", "-ledger-postgres-url", "postgres://y"}, "-ledger-postgres-url is for -store memory or redis"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if !errors.Is(err, errUsage) || exitCode(err, io.Discard) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want a usage error (status 2) saying %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"-store", "redis", "-ledger-postgres-url", "postgres://y", "-redis-addr", "a:1"},
		{"-ledger-postgres-url", "postgres://y", "-max-entries", "3"},
	} {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("parseFlags(%q) = %v, want it accepted", args, err)
		}
	}
}

// The binary: a flag of another store exits 2, a foreign table of the demo's
// name exits 1 naming it, -version prints the module version and exits 0.
func TestBinaryStartUpRefusals(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("go build: %v", err)
	}
	url, _ := demoSchema(t)
	if _, err := pgxExec(url, strings.ReplaceAll(userPayments, "payments", paymentsTable)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"-store", "redis", "-postgres-url", url}, 2, "-postgres-url belongs to -store postgres"},
		{[]string{"-addr", "127.0.0.1:0", "-store", "postgres", "-postgres-url", url}, 1, "table " + paymentsTable + " exists with another shape"},
		{[]string{"-version"}, 0, "idem-server "}, // (devel), or a version stamped from the VCS
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		if code := exitStatus(err); code != tc.status || !strings.Contains(string(out), tc.want) {
			t.Errorf("idem-server %q: exit %d, output %q; want %d and %q", tc.args, code, out, tc.status, tc.want)
		}
	}
}
