package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// Regression: PostgreSQL is partitioned from the owner mid-handler, after its
// business write (no answer, no reset). Before, nothing bounded it on either
// side: the owner's backend kept its transaction and the key's lock, so every
// duplicate, from any instance, was told in progress for as long as the
// partition lasted, and the owner's request hung until its client gave up.
// Now PostgreSQL ends the claim's transaction once it has waited
// WithIdleInTxTimeout for a statement (rolling the business write back), the
// key is free, a duplicate on another instance runs once, and the owner's Do
// fails with ErrNotRecorded within the finish timeout: one payment.
func TestPartitionMidHandlerFreesTheKey(t *testing.T) {
	t.Parallel()
	direct := pgtest.Pool(t, 4)
	table, ledgerTable := pgtest.Table(t, direct, "idem_part"), pgtest.Table(t, direct, "pay_part")
	other := newEnvOn(t, direct, table, ledgerTable) // another instance, not cut off

	part := pgtest.NewPartition(t)
	cfg, err := pgxpool.ParseConfig(part.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgstore.ConfigurePool(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	defer part.Close() // first: the pool's connections into the partition then end at once
	owner := newEnvOn(t, pool, table, ledgerTable,
		pgstore.WithIdleInTxTimeout(500*time.Millisecond), pgstore.WithFinishTimeout(500*time.Millisecond))

	wrote, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := owner.store.Do(context.Background(), req("pay", "fp"), func(ctx context.Context) (*server.Response, bool) {
			if err := owner.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				t.Errorf("the owner's payment: %v", err)
			}
			close(wrote)
			<-release // the handler goes on; PostgreSQL no longer hears from it
			return &server.Response{Status: 201, Header: http.Header{}, Body: []byte("owner")}, true
		})
		done <- err
	}()
	recvOrFail(t, wrote, "the owner's business write")
	part.Cut()

	dup := req("pay", "fp")
	dup.Wait = 5 * time.Second
	calls := 0
	res, err := other.store.Do(context.Background(), dup, payRun(t, other, &calls, true))
	close(release)
	if err != nil || res.Outcome != server.OutcomeExecuted {
		t.Errorf("duplicate on another instance during the partition: %v, %v; want executed once the owner's transaction ended", res.Outcome, err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, server.ErrNotRecorded) {
			t.Errorf("the cut-off owner's Do: %v, want ErrNotRecorded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cut-off owner's Do still runs 10 s after its handler returned")
	}
	if n := other.count(t); n != 1 {
		t.Fatalf("%d payments, want 1 (the owner's rolled back with its transaction)", n)
	}
}

// ConfigurePool makes PostgreSQL notice a client cut off (keepalives and
// tcp_user_timeout on its side of each session) when it is reached directly,
// and leaves a value the URL names alone.
func TestConfigurePoolSetsServerKeepalives(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 1)
	for name, want := range map[string]string{
		"tcp_keepalives_idle": "15", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3", "tcp_user_timeout": "30000",
	} {
		var got string
		if err := pool.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	cfg, err := pgxpool.ParseConfig(pgtest.URL() + "&tcp_keepalives_idle=60")
	if err != nil {
		t.Fatal(err)
	}
	if err := pgstore.ConfigurePool(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.ConnConfig.RuntimeParams["tcp_keepalives_idle"]; got != "60" {
		t.Errorf("tcp_keepalives_idle named in the URL: %q after ConfigurePool, want 60", got)
	}
}

// WithStatementTimeout: a handler's statement that runs too long (here a
// sleep; in life a write behind another transaction's row lock) is cancelled
// by PostgreSQL, the handler fails in bounded time, and the key is free; the
// idle-in-transaction timeout is set alongside, and both are the transaction's
// only: the session's settings are back after it.
func TestStatementTimeoutBoundsTheHandlersStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgstore.WithStatementTimeout(100*time.Millisecond))
	var sqlErr error
	var idle string
	res, err := e.store.Do(context.Background(), req("slow", "fp"), func(ctx context.Context) (*server.Response, bool) {
		tx := pgstore.Tx(ctx)
		if err := tx.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle); err != nil {
			t.Errorf("reading the setting: %v", err)
		}
		_, sqlErr = tx.Exec(ctx, "SELECT pg_sleep(10)")
		return &server.Response{Status: 503}, false
	})
	var pgErr *pgconn.PgError
	if err != nil || res.Outcome != server.OutcomeExecuted || !errors.As(sqlErr, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("Do = %v, %v; the handler's statement: %v; want it cancelled (57014)", res.Outcome, err, sqlErr)
	}
	if idle != "1min" {
		t.Errorf("idle_in_transaction_session_timeout in the claim's transaction = %q, want 1min", idle)
	}
	var stmt string
	if err := e.pool.QueryRow(context.Background(), "SELECT current_setting('statement_timeout')").Scan(&stmt); err != nil || stmt != "0" {
		t.Errorf("statement_timeout outside the claim's transaction = %q, %v; want the session's 0", stmt, err)
	}
	calls := 0
	e.execute(t, "slow", "fp", &calls) // rolled back: the key is free
}
