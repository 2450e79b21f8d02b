package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// Regression: Redis stalls (SIGSTOP) for twice the lease while the handler is
// past its business write and still running (it ignores its context, as a call
// to a payment provider does). The owner survives the stall, so it must keep
// its claim: it renews as soon as Redis answers again, within the grace the
// claim script allows, and a duplicate that arrives after the stall waits
// (in-progress) instead of taking the key. Before, the owner stopped renewing
// at its local expiry, the duplicate took the key one grace later and ran the
// handler a second time: two payments.
func TestRedisStallLongerThanTheLeaseRunsOnce(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	owner := New(srv.client(t), WithOpTimeout(200*time.Millisecond))
	other := New(srv.client(t)) // another instance of the server, where the duplicate lands
	r := req("pay", "fp")
	r.LockTTL = 600 * time.Millisecond

	var payments atomic.Int32
	wrote, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := owner.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			payments.Add(1) // the business write
			close(wrote)
			<-release // the rest of the handler, deaf to its context
			return response(201, "paid once"), true
		})
		done <- err
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	srv.pause()
	time.Sleep(2 * r.LockTTL) // the stall outlasts the lease: the passing of time is what is tested
	srv.resume()

	dup := r
	dup.Wait = 3 * grace(r.LockTTL) // long enough to take the key if the owner did not speak up
	got, err := other.Do(context.Background(), dup, func(context.Context) (*server.Response, bool) {
		payments.Add(1)
		return response(201, "paid twice"), true
	})
	close(release)
	if err != nil || got.Outcome != server.OutcomeInProgress {
		t.Errorf("duplicate after the stall: %v, %v; want in-progress (the owner still runs)", got.Outcome, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the owner's Do after the stall: %v, want its response recorded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's Do did not return")
	}
	retry := mustDo(t, other, r, neverRun(t))
	if retry.Outcome != server.OutcomeReplayed || string(retry.Response.Body) != "paid once" {
		t.Fatalf("retry after the owner finished: %v %q, want the owner's response replayed", retry.Outcome, retry.Response.Body)
	}
	if n := payments.Load(); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
}
