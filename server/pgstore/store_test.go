package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

func TestDoExecutesOnceThenReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	calls := 0
	first, err := e.store.Do(ctx, req("k1", "fp1"), payRun(t, e, &calls, true))
	if err != nil || first.Outcome != server.OutcomeExecuted {
		t.Fatalf("first Do = %v, %v; want executed", first.Outcome, err)
	}
	for i := range 3 {
		got, err := e.store.Do(ctx, req("k1", "fp1"), payRun(t, e, &calls, true))
		if err != nil || got.Outcome != server.OutcomeReplayed {
			t.Fatalf("replay %d = %v, %v; want replayed", i, got.Outcome, err)
		}
		if !reflect.DeepEqual(got.Response, first.Response) {
			t.Fatalf("replay %d = %+v; want %+v", i, got.Response, first.Response)
		}
	}
	if calls != 1 || e.count(t) != 1 {
		t.Fatalf("run called %d times, %d payments; want 1 and 1", calls, e.count(t))
	}
}

func TestDoOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		second    server.Request
		advance   time.Duration
		want      server.Outcome
		wantCalls int
	}{
		{"same key and fingerprint replays", req("k", "fp"), 0, server.OutcomeReplayed, 1},
		{"other fingerprint is a mismatch", req("k", "other"), 0, server.OutcomeMismatch, 1},
		{"other key runs", req("k2", "fp"), 0, server.OutcomeExecuted, 2},
		{"other scope runs", server.Request{Scope: "tenant-b", Key: "k", Fingerprint: "fp", TTL: time.Hour}, 0, server.OutcomeExecuted, 2},
		{"empty scope is a scope of its own", server.Request{Key: "k", Fingerprint: "fp", TTL: time.Hour}, 0, server.OutcomeExecuted, 2},
		{"still live just before expiry", req("k", "fp"), time.Hour - time.Minute, server.OutcomeReplayed, 1},
		{"expired record is a new operation", req("k", "fp"), time.Hour, server.OutcomeExecuted, 2},
		{"expired record with another fingerprint runs", req("k", "other"), time.Hour + time.Second, server.OutcomeExecuted, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			calls := 0
			e.execute(t, "k", "fp", &calls)
			if tt.advance > 0 {
				pgtest.Advance(t, e.pool, e.table, tt.advance)
			}
			res, err := e.store.Do(ctx, tt.second, payRun(t, e, &calls, true))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tt.want || calls != tt.wantCalls || e.count(t) != tt.wantCalls {
				t.Fatalf("second Do = %v with %d runs, %d payments; want %v, %d", res.Outcome, calls, e.count(t), tt.want, tt.wantCalls)
			}
			if tt.want == server.OutcomeMismatch && res.Response != nil {
				t.Fatalf("mismatch carries a response: %+v", res.Response)
			}
			// After a takeover the new record is what replays.
			if tt.want == server.OutcomeExecuted {
				again, err := e.store.Do(ctx, tt.second, payRun(t, e, &calls, true))
				if err != nil || again.Outcome != server.OutcomeReplayed || !reflect.DeepEqual(again.Response, res.Response) {
					t.Fatalf("replay of the second = %v %+v, %v; want %+v", again.Outcome, again.Response, err, res.Response)
				}
			}
		})
	}
}

func TestDoNotKeptRollsBackBusinessWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	calls := 0
	res, err := e.store.Do(ctx, req("k", "fp"), payRun(t, e, &calls, false))
	if err != nil || res.Outcome != server.OutcomeExecuted || res.Response == nil || res.Response.Status != 201 {
		t.Fatalf("Do = %+v, %v; want executed with the handler's response", res, err)
	}
	if n := e.count(t); n != 0 {
		t.Fatalf("%d payments after a response that was not kept; want 0 (rolled back)", n)
	}
	res, err = e.store.Do(ctx, req("k", "fp"), payRun(t, e, &calls, true))
	if err != nil || res.Outcome != server.OutcomeExecuted || calls != 2 || e.count(t) != 1 {
		t.Fatalf("retry = %v, %v, %d runs, %d payments; want executed again, 1 payment", res.Outcome, err, calls, e.count(t))
	}
}

func TestDoPanicRollsBackAndRepanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	type boom struct{}
	func() {
		defer func() {
			if r := recover(); r != (boom{}) {
				t.Fatalf("recovered %v; want the handler's panic", r)
			}
		}()
		_, _ = e.store.Do(ctx, req("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				t.Error(err)
			}
			panic(boom{})
		})
		t.Fatal("Do returned after a panic")
	}()
	if n := e.count(t); n != 0 {
		t.Fatalf("%d payments after a panic; want 0", n)
	}
	calls := 0
	res, err := e.store.Do(ctx, req("k", "fp"), payRun(t, e, &calls, true))
	if err != nil || res.Outcome != server.OutcomeExecuted || e.count(t) != 1 {
		t.Fatalf("retry after panic = %v, %v, %d payments; want executed, 1", res.Outcome, err, e.count(t))
	}
}

func TestDoRoundTripsResponseExactly(t *testing.T) {
	t.Parallel()
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	tests := []struct {
		name string
		resp server.Response
	}{
		{"binary body with NUL and invalid UTF-8", server.Response{Status: 200, Header: http.Header{}, Body: allBytes}},
		{"repeated and odd header values", server.Response{Status: 201, Header: http.Header{
			"Link":         {"</a>; rel=next", "</b>; rel=prev", "</a>; rel=next"},
			"Content-Type": {"application/octet-stream"},
			"X-Empty":      {""},
			"X-Latin1":     {"caf\xe9", "\x00nul"},
			"X-No-Values":  {},
		}, Body: []byte("ok")}},
		{"nil header and nil body", server.Response{Status: 204}},
		{"empty header and empty body", server.Response{Status: 202, Header: http.Header{}, Body: []byte{}}},
		{"4xx is replayed too", server.Response{Status: 422, Header: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{"status":422}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			want := tt.resp
			sent := &server.Response{Status: want.Status, Header: want.Header.Clone(), Body: bytes.Clone(want.Body)}
			if _, err := e.store.Do(ctx, req("k", "fp"), func(context.Context) (*server.Response, bool) { return sent, true }); err != nil {
				t.Fatal(err)
			}
			got, err := e.store.Do(ctx, req("k", "fp"), func(context.Context) (*server.Response, bool) {
				t.Error("run called on a replay")
				return nil, false
			})
			if err != nil || got.Outcome != server.OutcomeReplayed {
				t.Fatalf("replay = %v, %v", got.Outcome, err)
			}
			if !reflect.DeepEqual(*got.Response, want) {
				t.Fatalf("replayed %#v\nwant     %#v", *got.Response, want)
			}
		})
	}
}

func TestDoHandlerSeesSessionLockTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgstore.WithLockTimeout(123*time.Millisecond))
	ctx := context.Background()
	var session, inHandler string
	if err := e.pool.QueryRow(ctx, "SHOW lock_timeout").Scan(&session); err != nil {
		t.Fatal(err)
	}
	_, err := e.store.Do(ctx, req("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
		if err := pgstore.Tx(ctx).QueryRow(ctx, "SHOW lock_timeout").Scan(&inHandler); err != nil {
			t.Error(err)
		}
		return &server.Response{Status: 200}, true
	})
	if err != nil {
		t.Fatal(err)
	}
	if inHandler != session {
		t.Fatalf("handler runs with lock_timeout %q; want the session's %q (the store's is for the claim only)", inHandler, session)
	}
}

func TestDoRecordFailureIsNotRecorded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// write runs in the handler, which then answers 201 with keep.
		write func(ctx context.Context, e env) error
		// says is in Do's error, if set.
		says string
	}{
		{"handler ignored a failed statement (transaction aborted)", func(ctx context.Context, e env) error {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				return err
			}
			_, _ = pgstore.Tx(ctx).Exec(ctx, "SELECT 1/0")
			return nil
		}, ""},
		{"COMMIT fails on a deferred constraint", func(ctx context.Context, e env) error {
			tx := pgstore.Tx(ctx)
			if _, err := tx.Exec(ctx, "CREATE TEMP TABLE d (v int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP"); err != nil {
				return err
			}
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO d VALUES (1), (1)")
			return err
		}, ""},
		{"a row of the key in the way: the record fails, COMMIT must not run", func(ctx context.Context, e env) error {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				return err
			}
			_, err := pgstore.Tx(ctx).Exec(ctx, "INSERT INTO "+e.table+
				" (scope, key, fingerprint, owner_token, state, status, expires_at) VALUES ('tenant-a', 'k', 'fp', 'someone-else', 'done', 201, now() + interval '1 hour')")
			return err
		}, ""},
		{"handler rolled back and began again: not the claim's transaction, the record is refused", func(ctx context.Context, e env) error {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				return err
			}
			tx := pgstore.Tx(ctx)
			if _, err := tx.Exec(ctx, "ROLLBACK"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "BEGIN"); err != nil {
				return err
			}
			return e.ledger.insert(ctx, paymentFor(ctx))
		}, "not the claim's transaction"},
		{"handler rolled the transaction back", func(ctx context.Context, e env) error {
			if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
				return err
			}
			return pgstore.Tx(ctx).Rollback(ctx)
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			res, err := e.store.Do(ctx, req("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
				if err := tt.write(ctx, e); err != nil {
					t.Errorf("write: %v", err)
				}
				return &server.Response{Status: 201}, true
			})
			if !errors.Is(err, server.ErrNotRecorded) {
				t.Fatalf("Do = %+v, %v; want an error wrapping ErrNotRecorded", res, err)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Do's error %q does not say %q", err, tt.says)
			}
			if n := e.count(t); n != 0 {
				t.Fatalf("%d payments; want 0: the business write must roll back with the record", n)
			}
			calls := 0
			res, err = e.store.Do(ctx, req("k", "fp"), payRun(t, e, &calls, true))
			if err != nil || res.Outcome != server.OutcomeExecuted || e.count(t) != 1 {
				t.Fatalf("retry = %v, %v, %d payments; want executed, 1", res.Outcome, err, e.count(t))
			}
		})
	}
}

// TestDoTakeoverNeverOverwritesALiveRecord: a record written over an expired one
// requires it to be expired still; a live record in the way (here the handler
// revives it through its transaction) fails the record, and COMMIT does not run.
func TestDoTakeoverNeverOverwritesALiveRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	calls := 0
	e.execute(t, "k", "fp", &calls)
	pgtest.Advance(t, e.pool, e.table, 2*time.Hour)
	pay := payRun(t, e, &calls, true)
	res, err := e.store.Do(ctx, req("k", "fp2"), func(ctx context.Context) (*server.Response, bool) {
		if _, err := pgstore.Tx(ctx).Exec(ctx, "UPDATE "+e.table+" SET expires_at = now() + interval '1 hour'"); err != nil {
			t.Errorf("reviving the expired record: %v", err)
		}
		return pay(ctx)
	})
	if !errors.Is(err, server.ErrNotRecorded) || e.count(t) != 1 {
		t.Fatalf("takeover over a live record = %+v, %v, %d payments; want ErrNotRecorded and the first payment only", res, err, e.count(t))
	}
	if res, err := e.store.Do(ctx, req("k", "fp2"), payRun(t, e, &calls, true)); err != nil || res.Outcome != server.OutcomeExecuted || e.count(t) != 2 {
		t.Fatalf("retry = %v, %v, %d payments; want executed, 2", res.Outcome, err, e.count(t))
	}
}

func TestTxCommitIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	calls := 0
	var commitErr error
	res, err := e.store.Do(ctx, req("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
		resp, keep := payRun(t, e, &calls, true)(ctx)
		commitErr = pgstore.Tx(ctx).Commit(ctx)
		return resp, keep
	})
	if !errors.Is(commitErr, pgstore.ErrSharedTx) {
		t.Fatalf("Tx(ctx).Commit() = %v; want ErrSharedTx", commitErr)
	}
	if err != nil || res.Outcome != server.OutcomeExecuted || e.count(t) != 1 {
		t.Fatalf("Do = %v, %v, %d payments; want executed and 1 payment", res.Outcome, err, e.count(t))
	}
	if pgstore.Tx(ctx) != nil {
		t.Fatal("Tx outside Do is not nil")
	}
}

func TestDoRecordsAfterClientDisconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	res, err := e.store.Do(ctx, req("k", "fp"), func(rctx context.Context) (*server.Response, bool) {
		resp, keep := payRun(t, e, &calls, true)(rctx)
		cancel() // the client goes away after the handler's work
		return resp, keep
	})
	if err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("Do = %v, %v; want executed and recorded on a detached context", res.Outcome, err)
	}
	res, err = e.store.Do(context.Background(), req("k", "fp"), payRun(t, e, &calls, true))
	if err != nil || res.Outcome != server.OutcomeReplayed || calls != 1 || e.count(t) != 1 {
		t.Fatalf("retry = %v, %v, %d runs; want replayed, 1 run", res.Outcome, err, calls)
	}
}

func TestDoStoreUnreachableNeverRuns(t *testing.T) {
	t.Parallel()
	store := pgstore.New(unreachablePool(t, 4))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := store.Do(ctx, req("k", "fp"), func(context.Context) (*server.Response, bool) {
		t.Error("run called while the store is unreachable")
		return nil, false
	})
	if err == nil || errors.Is(err, server.ErrNotRecorded) {
		t.Fatalf("Do = %+v, %v; want a store error (not ErrNotRecorded)", res, err)
	}
}

func TestDoRejectsNonPositiveTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := req("k", "fp")
	r.TTL = 0
	if _, err := e.store.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
		t.Error("run called")
		return nil, false
	}); err == nil {
		t.Fatal("Do with TTL 0 succeeded")
	}
}

// A crash of the owner between the business write and the record is its
// connection going away: PostgreSQL rolls back the claim and the payment together.
func TestDoConnectionLostAfterBusinessWriteLeavesNeither(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	res, err := e.store.Do(ctx, req("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
		if err := e.ledger.insert(ctx, paymentFor(ctx)); err != nil {
			t.Errorf("insert: %v", err)
		}
		var pid int32
		if err := pgstore.Tx(ctx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Errorf("pid: %v", err)
		}
		// With a timeout, pg_terminate_backend returns once the backend has
		// exited, its locks released: without one it only signals, and the
		// retry below could find the claim's lock still held (in progress)
		// by a backend whose client had already seen its connection end.
		var ended bool
		if err := e.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 20000)", pid).Scan(&ended); err != nil || !ended {
			t.Errorf("terminate: %v, %v; want the backend ended", ended, err)
		}
		return &server.Response{Status: 201}, true
	})
	if !errors.Is(err, server.ErrNotRecorded) {
		t.Fatalf("Do = %+v, %v; want ErrNotRecorded", res, err)
	}
	if n, r := e.count(t), e.records(t); n != 0 || r != 0 {
		t.Fatalf("%d payments, %d records after the owner's connection died; want neither", n, r)
	}
	calls := 0
	res, err = e.store.Do(ctx, req("k", "fp"), payRun(t, e, &calls, true))
	if err != nil || res.Outcome != server.OutcomeExecuted || e.count(t) != 1 {
		t.Fatalf("retry = %v, %v, %d payments; want executed, 1", res.Outcome, err, e.count(t))
	}
}
