package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// seed records n keys with the given prefix through Do.
func seed(t *testing.T, e env, prefix string, n int) {
	t.Helper()
	for i := range n {
		_, err := e.store.Do(context.Background(), req(fmt.Sprintf("%s-%d", prefix, i), "fp"), func(context.Context) (*server.Response, bool) {
			return &server.Response{Status: 200}, true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (e env) records(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDeleteExpired(t *testing.T) {
	t.Parallel()
	eachTopology(t, deleteExpired)
}

func deleteExpired(t *testing.T, tp pgtest.Topology) {
	tests := []struct {
		name          string
		expired, live int
		batch         int
	}{
		{"nothing expired", 0, 3, 10},
		{"fewer than a batch", 7, 3, 10},
		{"exactly one batch", 10, 3, 10},
		{"several batches", 25, 3, 10},
		{"batch of one", 4, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvVia(t, tp)
			seed(t, e, "old", tt.expired)
			pgtest.Advance(t, e.pool, e.table, 2*time.Hour)
			seed(t, e, "new", tt.live)
			n, err := e.store.DeleteExpired(context.Background(), tt.batch)
			if err != nil || n != int64(tt.expired) {
				t.Fatalf("DeleteExpired = %d, %v; want %d", n, err, tt.expired)
			}
			if got := e.records(t); got != tt.live {
				t.Fatalf("%d records left; want the %d live ones", got, tt.live)
			}
		})
	}
	t.Run("batch must be positive", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if _, err := e.store.DeleteExpired(context.Background(), 0); err == nil {
			t.Fatal("DeleteExpired(0) succeeded")
		}
	})
}

// TestDeleteExpiredSkipsLockedRows: a row locked at that moment (a record being
// written over an expired one holds it) is left to a later run.
func TestDeleteExpiredSkipsLockedRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seed(t, e, "k", 1)
	pgtest.Advance(t, e.pool, e.table, 2*time.Hour)
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+e.table+" FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.DeleteExpired(ctx, 10); err != nil || n != 0 {
		t.Fatalf("DeleteExpired with the row locked = %d, %v; want 0 (skipped)", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.DeleteExpired(ctx, 10); err != nil || n != 1 {
		t.Fatalf("DeleteExpired once the lock is gone = %d, %v; want 1", n, err)
	}
}

// TestDeleteExpiredDuringATakeover: a claim holds the key of an expired record,
// not its row, while its handler runs; the reaper deletes the row meanwhile, and
// the new record is inserted all the same.
func TestDeleteExpiredDuringATakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seed(t, e, "k", 1)
	pgtest.Advance(t, e.pool, e.table, 2*time.Hour)
	release, done := holdClaim(t, e, req("k-0", "fp2"), true)
	if n, err := e.store.DeleteExpired(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("DeleteExpired during a takeover = %d, %v; want the expired record deleted", n, err)
	}
	release()
	if res := <-done; res.Outcome != server.OutcomeExecuted {
		t.Fatalf("takeover = %v, want executed", res.Outcome)
	}
	res, err := e.store.Do(context.Background(), req("k-0", "fp2"), nil)
	if err != nil || res.Outcome != server.OutcomeReplayed || string(res.Response.Body) != "first" {
		t.Fatalf("after the takeover = %+v, %v; want the replay of its record", res, err)
	}
}

func TestStartReaper(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seed(t, e, "old", 5)
	pgtest.Advance(t, e.pool, e.table, 2*time.Hour)
	type report struct {
		n   int64
		err error
	}
	reports := make(chan report, 16)
	stop := e.store.StartReaper(context.Background(), pgstore.Reaper{Interval: time.Hour, Batch: 2,
		Report: func(n int64, err error) { reports <- report{n, err} }})
	r := <-reports // the first run is immediate
	stop()
	stop() // idempotent
	if r.err != nil || r.n != 5 || e.records(t) != 0 {
		t.Fatalf("reaper run = %d, %v, %d left; want 5 deleted, none left", r.n, r.err, e.records(t))
	}

	t.Run("reports errors and stops with its context", func(t *testing.T) {
		store := pgstore.New(unreachablePool(t, 4))
		ctx, cancel := context.WithCancel(context.Background())
		reports := make(chan error, 16)
		stop := store.StartReaper(ctx, pgstore.Reaper{Interval: time.Millisecond, Report: func(_ int64, err error) { reports <- err }})
		if err := <-reports; err == nil {
			t.Fatal("reaper on an unreachable server reported no error")
		}
		cancel()
		stop() // returns once the goroutine has ended
	})

	t.Run("negative settings panic", func(t *testing.T) {
		requirePanic(t, "pgstore: StartReaper(Reaper{Interval: 0s, Batch: -1}): want Interval and Batch >= 0",
			func() { e.store.StartReaper(context.Background(), pgstore.Reaper{Batch: -1}) })
		requirePanic(t, "pgstore: StartReaper(Reaper{Interval: -1s, Batch: 0}): want Interval and Batch >= 0",
			func() { e.store.StartReaper(context.Background(), pgstore.Reaper{Interval: -time.Second}) })
	})
}
