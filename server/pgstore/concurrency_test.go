package pgstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

func TestDoConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	eachTopology(t, concurrentDuplicatesRunOnce)
}

func concurrentDuplicatesRunOnce(t *testing.T, tp pgtest.Topology) {
	const n = 10
	e := newEnvVia(t, tp)
	var calls atomic.Int32
	run := func(ctx context.Context) (*server.Response, bool) {
		calls.Add(1)
		if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
			t.Errorf("insert: %v", err)
			return &server.Response{Status: 503}, false
		}
		return &server.Response{Status: 201, Body: []byte("paid")}, true
	}
	start := make(chan struct{})
	results := make([]server.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			r := req("dup", "fp")
			r.Wait = time.Duration(i%2) * time.Minute // half wait for the first, half answer at once
			results[i], errs[i] = e.store.Do(context.Background(), r, run)
		})
	}
	close(start)
	wg.Wait()
	executed := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("Do %d: %v", i, errs[i])
		}
		switch r.Outcome {
		case server.OutcomeExecuted:
			executed++
		case server.OutcomeReplayed:
			if string(r.Response.Body) != "paid" {
				t.Fatalf("Do %d replayed %q", i, r.Response.Body)
			}
		case server.OutcomeInProgress:
			if r.RetryAfter <= 0 {
				t.Fatalf("Do %d: in progress without RetryAfter", i)
			}
		default:
			t.Fatalf("Do %d = %v", i, r.Outcome)
		}
	}
	if executed != 1 || calls.Load() != 1 || e.count(t) != 1 {
		t.Fatalf("%d executed, %d runs, %d payments; want exactly 1 each", executed, calls.Load(), e.count(t))
	}
}

// holdClaim starts a Do on key whose handler writes a payment and then blocks
// until release is called (at the latest when the test ends); it returns once
// the claim is held.
func holdClaim(t *testing.T, e env, r server.Request, keep bool) (release func(), done chan server.Result) {
	t.Helper()
	claimed := make(chan struct{})
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(release) // a failed test must not leave the claim held: its table is dropped
	done = make(chan server.Result, 1)
	go func() {
		res, err := e.store.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				t.Errorf("insert: %v", err)
			}
			close(claimed)
			<-released
			return &server.Response{Status: 201, Body: []byte("first")}, keep
		})
		if err != nil {
			t.Errorf("holding Do: %v", err)
		}
		done <- res
	}()
	select {
	case <-claimed:
	case res := <-done:
		t.Fatalf("holding Do returned %+v without running its handler", res)
	}
	return release, done
}

// waitForLockWaiter returns once a duplicate of r waits for the key on e's
// store: it found the owner running and looks again, holding nothing.
func waitForLockWaiter(t *testing.T, e env, _ server.Request) {
	t.Helper()
	waitForWaiters(t, e, 1)
}

// waitForWaiters returns once n Do calls of e's store wait for a key.
func waitForWaiters(t *testing.T, e env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.store.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d duplicates ever waited for the key", e.store.Waiting(), n)
		}
		time.Sleep(time.Millisecond) // polling a gauge; not an ordering assumption
	}
}

// TestDoDuplicateBeyondTheWaitIsInProgress: a duplicate waits on the key lock no
// longer than the smaller of its Request.Wait and WithLockTimeout (Wait 0: at
// once), then reports in progress, with RetryAfter the rest of the owner's
// LockTTL, or a mismatch for another fingerprint.
func TestDoDuplicateBeyondTheWaitIsInProgress(t *testing.T) {
	t.Parallel()
	eachTopology(t, duplicateBeyondTheWaitIsInProgress)
}

func duplicateBeyondTheWaitIsInProgress(t *testing.T, tp pgtest.Topology) {
	e := newEnvVia(t, tp, pgstore.WithLockTimeout(time.Hour))
	release, done := holdClaim(t, e, req("k", "fp"), true)
	// Another store on another table with the same scope, key and fingerprint:
	// its claims are independent of e's.
	other := newEnvVia(t, tp)
	calls := 0
	other.execute(t, "k", "fp", &calls)
	for _, tt := range []struct {
		fp   string
		wait time.Duration
		want server.Outcome
	}{
		{"fp", 0, server.OutcomeInProgress},
		{"other", 0, server.OutcomeMismatch},
		{"fp", 30 * time.Millisecond, server.OutcomeInProgress},
		{"other", 30 * time.Millisecond, server.OutcomeMismatch},
	} {
		r := req("k", tt.fp)
		r.Wait = tt.wait
		start := time.Now()
		res, err := e.store.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			t.Error("duplicate ran while the first holds the claim")
			return nil, false
		})
		took := time.Since(start)
		if err != nil || res.Outcome != tt.want || res.Response != nil {
			t.Fatalf("duplicate (fingerprint %s, wait %v) = %+v, %v; want %v", tt.fp, tt.wait, res, err, tt.want)
		}
		if took > 20*time.Second { // the lock timeout is an hour: the wait bounded it
			t.Fatalf("duplicate (wait %v) answered after %v", tt.wait, took)
		}
		// The owner has run for less than its LockTTL: RetryAfter is the rest.
		if tt.want == server.OutcomeInProgress && (res.RetryAfter <= r.LockTTL-20*time.Second || res.RetryAfter > r.LockTTL) {
			t.Fatalf("RetryAfter %v, want the rest of the LockTTL %v", res.RetryAfter, r.LockTTL)
		}
	}
	release()
	if res := <-done; res.Outcome != server.OutcomeExecuted {
		t.Fatalf("first = %v", res.Outcome)
	}
	res, err := e.store.Do(context.Background(), req("k", "fp"), nil)
	if err != nil || res.Outcome != server.OutcomeReplayed || string(res.Response.Body) != "first" || e.count(t) != 1 {
		t.Fatalf("after the first finished = %+v, %v, %d payments; want its replay, 1 payment", res, err, e.count(t))
	}
}

// TestDoDuplicateWaitsForTheFirst: a duplicate that arrives while the first
// request is written but not yet answered waits on the key lock and gets its
// replay as soon as it commits; if the first rolls back (5xx, panic) the
// duplicate runs the handler itself: one payment either way.
func TestDoDuplicateWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	eachTopology(t, duplicateWaitsForTheFirst)
}

func duplicateWaitsForTheFirst(t *testing.T, tp pgtest.Topology) {
	tests := []struct {
		name      string
		keep      bool
		fp        string
		want      server.Outcome
		wantBody  string
		wantCount int
	}{
		{"first recorded: replay", true, "fp", server.OutcomeReplayed, "first", 1},
		{"first recorded, other fingerprint: mismatch", true, "other", server.OutcomeMismatch, "", 1},
		{"first rolled back: the duplicate runs", false, "fp", server.OutcomeExecuted, "second", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvVia(t, tp)
			release, done := holdClaim(t, e, req("k", "fp"), tt.keep)
			second := make(chan server.Result, 1)
			go func() {
				r := req("k", tt.fp)
				r.Wait = time.Minute // capped by the default lock timeout, 10s
				res, err := e.store.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
					if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
						t.Errorf("insert: %v", err)
					}
					return &server.Response{Status: 201, Body: []byte("second")}, true
				})
				if err != nil {
					t.Errorf("second Do: %v", err)
				}
				second <- res
			}()
			if tt.fp == "fp" { // another fingerprint is told mismatch at once: it does not wait
				waitForLockWaiter(t, e, req("k", "fp"))
			}
			release()
			<-done
			res := <-second
			body := ""
			if res.Response != nil {
				body = string(res.Response.Body)
			}
			if res.Outcome != tt.want || body != tt.wantBody || e.count(t) != tt.wantCount {
				t.Fatalf("second = %v %q, %d payments; want %v %q, %d", res.Outcome, body, e.count(t), tt.want, tt.wantBody, tt.wantCount)
			}
		})
	}
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	eachTopology(t, migrateIsIdempotentAndConcurrent)
}

func migrateIsIdempotentAndConcurrent(t *testing.T, tp pgtest.Topology) {
	pool := tp.Pool(t, 16)
	table, ledgerTable := pgtest.Table(t, pool, "idem_test"), pgtest.Table(t, pool, "pay_test")
	store := pgstore.New(pool, pgstore.WithTable(table))
	ledger := newLedger(pool, ledgerTable)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 6 { // the tables do not exist yet: the first creates them, the rest find them
		wg.Go(func() { <-start; errs <- store.Migrate(context.Background()) })
		wg.Go(func() { <-start; errs <- ledger.migrate(context.Background()) })
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	e := env{pool: pool, store: store, ledger: ledger, table: table}
	calls := 0
	if res, err := store.Do(context.Background(), req("k", "fp"), payRun(t, e, &calls, true)); err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("Do on the migrated tables = %v, %v", res.Outcome, err)
	}
}

// TestReplayDoesNotWaitForTheKey: while another transaction holds the key (a
// concurrent replay does, briefly), a replay answers from the record at once,
// even with a long Wait.
func TestReplayDoesNotWaitForTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	calls := 0
	e.execute(t, "k", "fp", &calls)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", e.store.KeyLock(req("k", "fp"))); err != nil {
		t.Fatal(err)
	}
	for _, fp := range []string{"fp", "other"} {
		r := req("k", fp)
		r.Wait = time.Hour
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a replay that waited would wait the lock timeout
		res, err := e.store.Do(wctx, r, payRun(t, e, &calls, true))
		cancel()
		if want := map[string]server.Outcome{"fp": server.OutcomeReplayed, "other": server.OutcomeMismatch}[fp]; err != nil || res.Outcome != want {
			t.Fatalf("fingerprint %s while the key is held = %v, %v; want %v", fp, res.Outcome, err, want)
		}
	}
	if calls != 1 {
		t.Fatalf("%d runs, want 1", calls)
	}
}
