package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// Regression: duplicates of one slow key, from one tenant, that wait for it
// each held a pooled connection (and a backend) for their whole wait; with
// the default pool of 4, three of them left the other tenants' new keys no
// connection, and those failed with ErrPoolExhausted (503). Waiters are now
// bounded to a share of the pool, and of it per scope; a duplicate past the
// bound is told in progress at once (409), so the other tenants' new keys all
// run, and the duplicates that could wait still replay the owner's response.
func TestWaitingDuplicatesDoNotStarveOtherTenants(t *testing.T) {
	t.Parallel()
	for _, poolSize := range []int32{4, 20} {
		t.Run(fmt.Sprint("pool ", poolSize), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t, poolSize)
			e := newEnvOn(t, pool, pgtest.Table(t, pool, "idem_flood"), pgtest.Table(t, pool, "pay_flood"))

			slow := req("slow", "fp")
			slow.Wait = 5 * time.Second
			dups := int(poolSize) - 1 // enough to hold every other connection
			running, release, ownerDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			answered := make(chan server.Result, dups)
			t.Cleanup(func() { // before the tables are dropped
				close(release)
				for range 1 + dups {
					select {
					case <-ownerDone:
					case <-answered:
					case <-time.After(20 * time.Second):
						t.Error("the owner or a duplicate did not return")
						return
					}
				}
			})
			go func() {
				_, err := e.store.Do(context.Background(), slow, func(context.Context) (*server.Response, bool) {
					close(running)
					<-release
					return &server.Response{Status: 201, Header: http.Header{}, Body: []byte("slow")}, true
				})
				if err != nil {
					t.Errorf("the slow owner: %v", err)
				}
				ownerDone <- err
			}()
			recvOrFail(t, running, "the slow owner's handler")
			for range dups {
				go func() {
					res, err := e.store.Do(context.Background(), slow, func(context.Context) (*server.Response, bool) {
						t.Error("a duplicate ran the handler")
						return nil, false
					})
					if err != nil || (res.Outcome != server.OutcomeInProgress && res.Outcome != server.OutcomeReplayed) {
						t.Errorf("duplicate: %v, %v; want in-progress, or the owner's replay", res.Outcome, err)
					}
					answered <- res
				}()
			}
			waitForWaiters(t, e, dups)

			other := req("", "fp")
			other.Scope = "tenant-b"
			for i := range 20 {
				other.Key = fmt.Sprint("new-", i)
				calls := 0
				res, err := e.store.Do(context.Background(), other, payRun(t, e, &calls, true))
				if err != nil || res.Outcome != server.OutcomeExecuted {
					t.Fatalf("tenant-b's new key %d during the flood: %v, %v; want executed", i, res.Outcome, err)
				}
			}
		})
	}
}

// recvOrFail waits (bounded) for ch to be closed.
func recvOrFail(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Ping answers nil while PostgreSQL serves, and an error once it cannot be
// reached (here: a pool on a port nothing listens on).
func TestPingTellsWhenPostgresCannotServe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.store.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	cfg := e.pool.Config()
	cfg.ConnConfig.Port = 1 // nothing listens there
	cfg.ConnConfig.ConnectTimeout = time.Second
	dead, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	if err := pgstore.New(dead).Ping(context.Background()); err == nil {
		t.Fatal("Ping on an unreachable server: nil, want an error")
	}
}
