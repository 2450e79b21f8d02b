package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// TestDoRecordExpiresTTLAfterTheRecord (issue 12, 4): the record lives TTL from
// when it is written, not from the claim, so a handler that runs longer than the
// TTL still leaves a record that an immediate retry replays instead of paying
// again. The handler here runs 200ms in the database (pg_sleep) and reads the
// database clock as it ends.
func TestDoRecordExpiresTTLAfterTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := req("k", "fp")
	r.TTL = time.Minute
	calls := 0
	pay := payRun(t, e, &calls, true)
	var claimed, answered time.Time
	res, err := e.store.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
		tx := pgstore.Tx(ctx)
		if err := tx.QueryRow(ctx, "SELECT now(), pg_sleep(0.2)::text, clock_timestamp()").Scan(&claimed, new(string), &answered); err != nil {
			t.Errorf("slow handler: %v", err)
		}
		return pay(ctx)
	})
	if err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("first = %v, %v", res.Outcome, err)
	}
	var created, expires time.Time
	if err := e.pool.QueryRow(context.Background(), "SELECT created_at, expires_at FROM "+e.table).Scan(&created, &expires); err != nil {
		t.Fatal(err)
	}
	if !created.Equal(claimed) {
		t.Fatalf("created_at %v; want the claim's transaction start %v", created, claimed)
	}
	if from := expires.Add(-r.TTL); from.Before(answered) {
		t.Fatalf("the record's TTL counts from %v, before the handler answered at %v", from, answered)
	}
	res, err = e.store.Do(context.Background(), r, pay)
	if err != nil || res.Outcome != server.OutcomeReplayed || calls != 1 || e.count(t) != 1 {
		t.Fatalf("immediate retry = %v, %v; %d runs, %d payments; want a replay of the one payment", res.Outcome, err, calls, e.count(t))
	}
}

// hold starts a Do whose handler writes a payment, signals, then waits for the
// returned finish function to say how to end: answer 201 (keep), 500 (not
// kept) or panic. It returns once the claim is held.
func hold(t *testing.T, e env, r server.Request) (finish func(how string), done <-chan struct{}) {
	t.Helper()
	claimed := make(chan struct{})
	how := make(chan string, 1)
	var once sync.Once
	finish = func(h string) { once.Do(func() { how <- h }) }
	t.Cleanup(func() { finish("keep") })
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		defer func() { _ = recover() }() // the "panic" ending: Do re-panics after rolling back
		_, err := e.store.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				t.Errorf("insert: %v", err)
			}
			close(claimed)
			switch <-how {
			case "panic":
				panic("handler panics after its business write")
			case "500":
				return &server.Response{Status: 500}, false
			}
			return &server.Response{Status: 201, Body: []byte("first")}, true
		})
		if err != nil {
			t.Errorf("holding Do: %v", err)
		}
	}()
	select {
	case <-claimed:
	case <-fin:
		t.Fatal("holding Do returned without running its handler")
	}
	return finish, fin
}

// TestDoWaiterRunsWhenTheFirstFails (issue 8): the first request is written but
// not answered; a duplicate waits on it; the first then fails (5xx or panic) and
// rolls back its payment: the waiter runs the handler itself. One payment.
func TestDoWaiterRunsWhenTheFirstFails(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		for _, how := range []string{"500", "panic"} {
			t.Run(how, func(t *testing.T) {
				t.Parallel()
				e := newEnvVia(t, tp)
				finish, firstDone := hold(t, e, req("k", "fp"))
				second := make(chan server.Result, 1)
				calls := 0
				go func() {
					r := req("k", "fp")
					r.Wait = 5 * time.Second
					res, err := e.store.Do(context.Background(), r, payRun(t, e, &calls, true))
					if err != nil {
						t.Errorf("waiter: %v", err)
					}
					second <- res
				}()
				waitForLockWaiter(t, e, req("k", "fp"))
				finish(how)
				<-firstDone
				if res := <-second; res.Outcome != server.OutcomeExecuted || calls != 1 || e.count(t) != 1 {
					t.Fatalf("waiter = %v, %d runs, %d payments; want executed, exactly one payment", res.Outcome, calls, e.count(t))
				}
			})
		}
	})
}

// TestDoWaitEndsWhenTheClientLeaves (issue 8): a waiting duplicate whose context
// ends stops waiting at once; the first request is unaffected.
func TestDoWaitEndsWhenTheClientLeaves(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		e := newEnvVia(t, tp, pgstore.WithLockTimeout(time.Hour))
		finish, firstDone := hold(t, e, req("k", "fp"))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			r := req("k", "fp")
			r.Wait = time.Hour
			_, err := e.store.Do(ctx, r, func(context.Context) (*server.Response, bool) {
				t.Error("the duplicate ran")
				return nil, false
			})
			errc <- err
		}()
		waitForLockWaiter(t, e, req("k", "fp"))
		cancel()
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("cancelled wait returned no error")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the wait did not end with the client")
		}
		finish("keep")
		<-firstDone
		res, err := e.store.Do(context.Background(), req("k", "fp"), nil)
		if err != nil || res.Outcome != server.OutcomeReplayed || e.count(t) != 1 {
			t.Fatalf("after = %v, %v, %d payments; want the first's replay", res.Outcome, err, e.count(t))
		}
	})
}

// TestPoolExhaustedFailsFast (issue 12, 7): slow handlers hold every pooled
// connection (no reserve); replays, duplicates and new keys fail within the
// acquire timeout (503 with Retry-After through the middleware) instead of
// hanging, and run again once a connection is free.
func TestPoolExhaustedFailsFast(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		pool := tp.Pool(t, 2)
		e := newEnvOn(t, pool, pgtest.Table(t, pool, "idem_test"), pgtest.Table(t, pool, "pay_test"),
			pgstore.WithAcquireTimeout(100*time.Millisecond), pgstore.WithReservedConns(0))
		calls := 0
		e.execute(t, "done", "fp", &calls)
		finishA, doneA := hold(t, e, req("a", "fp"))
		finishB, doneB := hold(t, e, req("b", "fp"))

		for _, key := range []string{"done", "a", "new"} {
			start := time.Now()
			_, err := e.store.Do(context.Background(), req(key, "fp"), func(context.Context) (*server.Response, bool) {
				t.Errorf("%s ran without a connection", key)
				return nil, false
			})
			if !errors.Is(err, pgstore.ErrPoolExhausted) {
				t.Fatalf("Do %s on a full pool = %v, want ErrPoolExhausted", key, err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("Do %s failed after %v", key, took)
			}
		}
		srv := httptest.NewServer(server.Middleware(e.store)(http.HandlerFunc(e.ledger.create)))
		t.Cleanup(srv.Close)
		hreq, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"customer":"c","amount":1,"currency":"EUR"}`))
		hreq.Header.Set("Idempotency-Key", "http")
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("through the middleware: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}

		finishA("keep")
		finishB("keep")
		<-doneA
		<-doneB
		if res, err := e.store.Do(context.Background(), req("done", "fp"), nil); err != nil || res.Outcome != server.OutcomeReplayed {
			t.Fatalf("replay once connections are free = %v, %v", res.Outcome, err)
		}
		if n := e.count(t); n != 3 {
			t.Fatalf("%d payments, want 3", n)
		}
	})
}

// TestMigrateWhileAClaimIsHeld: an instance that starts (Migrate) while another
// serves a slow handler does not wait for it: with the table and index in
// place, Migrate takes no lock a claim holds (CREATE INDEX IF NOT EXISTS would).
func TestMigrateWhileAClaimIsHeld(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		e := newEnvVia(t, tp)
		finish, done := hold(t, e, req("k", "fp"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.store.Migrate(ctx); err != nil {
			t.Fatalf("Migrate while a claim is held = %v", err)
		}
		finish("keep")
		<-done
	})
}

// TestReplaysDoNotWaitBehindSlowHandlers (issue 12, 7): with the default reserve
// (one of three connections), two slow handlers take every handler slot; a
// replay and a duplicate are still answered at once on the reserved
// connection, a new key fails with ErrPoolExhausted within the acquire timeout
// without running, and runs once a handler has finished.
func TestReplaysDoNotWaitBehindSlowHandlers(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		pool := tp.Pool(t, 3)
		e := newEnvOn(t, pool, pgtest.Table(t, pool, "idem_test"), pgtest.Table(t, pool, "pay_test"),
			pgstore.WithAcquireTimeout(100*time.Millisecond))
		calls := 0
		e.execute(t, "done", "fp", &calls)
		finishA, doneA := hold(t, e, req("a", "fp"))
		finishB, doneB := hold(t, e, req("b", "fp"))

		mustNotRun := func(context.Context) (*server.Response, bool) {
			t.Error("ran beyond the handler slots")
			return nil, false
		}
		for range 3 {
			if res, err := e.store.Do(context.Background(), req("done", "fp"), mustNotRun); err != nil || res.Outcome != server.OutcomeReplayed {
				t.Fatalf("replay beside two slow handlers = %v, %v; want a replay", res.Outcome, err)
			}
			if res, err := e.store.Do(context.Background(), req("a", "fp"), mustNotRun); err != nil || res.Outcome != server.OutcomeInProgress {
				t.Fatalf("duplicate beside two slow handlers = %v, %v; want in progress", res.Outcome, err)
			}
		}
		if _, err := e.store.Do(context.Background(), req("c", "fp"), mustNotRun); !errors.Is(err, pgstore.ErrPoolExhausted) {
			t.Fatalf("a third handler = %v, want ErrPoolExhausted", err)
		}
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.table+" WHERE key = 'c'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("the refused claim left %d rows (%v)", n, err)
		}

		finishA("keep")
		<-doneA
		e.execute(t, "c", "fp", &calls)
		finishB("keep")
		<-doneB
		if n := e.count(t); n != 4 {
			t.Fatalf("%d payments, want 4", n)
		}
	})
}

// TestMigrateDropsTheOldStateCheck: a table made by a version before issue 30
// has a CHECK constraint on state, which PostgreSQL reparses at every record.
// Migrate drops it when no claim holds the table, and leaves it, without
// waiting, while one does.
func TestMigrateDropsTheOldStateCheck(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 8)
	table := pgtest.Table(t, pool, "idem_old")
	ctx := context.Background()
	// The table as the previous version created it.
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (
    scope text NOT NULL, key text NOT NULL, fingerprint text NOT NULL, owner_token text NOT NULL,
    state text NOT NULL CHECK (state IN ('claimed', 'done')),
    status integer, header_names bytea[], header_values bytea[], body bytea,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(), expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key))`); err != nil {
		t.Fatal(err)
	}
	checks := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'", table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	e := newEnvOn(t, pool, table, pgtest.Table(t, pool, "pay_old"))
	if n := checks(); n != 0 {
		t.Fatalf("%d CHECK constraints after Migrate with no claim; want 0", n)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE "+table+" ADD CHECK (state IN ('claimed', 'done'))"); err != nil {
		t.Fatal(err)
	}
	finish, done := hold(t, e, req("held", "fp"))
	guard, cancel := context.WithTimeout(ctx, 10*time.Second) // a Migrate that waits would wait for the claim: past this
	defer cancel()
	if err := e.store.Migrate(guard); err != nil {
		t.Fatalf("Migrate while a claim holds the table: %v", err)
	}
	if n := checks(); n != 1 {
		t.Fatalf("%d CHECK constraints after Migrate beside a claim; want the old one left", n)
	}
	finish("keep")
	<-done
	if err := e.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := checks(); n != 0 {
		t.Fatalf("%d CHECK constraints after the claim ended; want 0", n)
	}
	e.execute(t, "after", "fp", new(int))
}
