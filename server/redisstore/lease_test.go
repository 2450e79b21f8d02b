package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// waitGone waits (bounded) until key no longer exists in Redis.
func waitGone(t *testing.T, s *Store, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.client.Exists(context.Background(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("key %q did not expire", key)
		}
		time.Sleep(time.Millisecond) // polling Redis for a state change, not ordering goroutines
	}
}

// A holder whose claim expired and was taken by a second owner can neither
// overwrite (finish) nor delete (release) the second owner's claim or record.
func TestLostLeaseCannotOverwriteNewerOwner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		keep bool // the first holder tries to finish (true) or release (false)
	}{
		{"finish", true},
		{"release", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := newTestStore(t)
			ctx := context.Background()
			key := s.key("tenant-a", "k")
			r := req("k", "fp") // LockTTL 10s: no renewal happens in this test

			secondHolds, firstDone := make(chan struct{}), make(chan struct{})
			secondErr := make(chan error, 1)
			var secondClaim string
			_, err := s.Do(ctx, r, func(context.Context) (*server.Response, bool) {
				// The lease runs out under the first holder...
				if err := c.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
					t.Fatal(err)
				}
				waitGone(t, s, key)
				// ...and a second owner claims the key.
				go func() {
					_, err := s.Do(ctx, r, func(context.Context) (*server.Response, bool) {
						secondClaim = c.Get(ctx, key).Val()
						close(secondHolds)
						<-firstDone
						if got := c.Get(ctx, key).Val(); got != secondClaim {
							t.Error("the first holder changed the second owner's claim")
						}
						return response(200, "second"), true
					})
					secondErr <- err
				}()
				<-secondHolds
				return response(200, "first"), tt.keep
			})
			close(firstDone)
			if !isNotRecorded(err) || !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("first Do error = %v, want ErrNotRecorded and ErrLeaseLost", err)
			}
			if err := <-secondErr; err != nil {
				t.Fatalf("second Do: %v", err)
			}
			got := mustDo(t, s, r, neverRun(t))
			if got.Outcome != server.OutcomeReplayed || string(got.Response.Body) != "second" {
				t.Fatalf("after both: %v %q, want the second owner's record replayed", got.Outcome, got.Response.Body)
			}
		})
	}
}

// The classic slow-handler case, scaled down (LockTTL 2s -> 1s): the handler
// takes 1.6 x LockTTL, a duplicate at 1.25 x LockTTL gets in-progress, and the
// handler runs exactly once because its lease is renewed.
func TestSlowHandlerKeepsLease(t *testing.T) {
	t.Parallel()
	const lockTTL = time.Second
	s, c := newTestStore(t)
	r := req("slow", "fp")
	r.LockTTL = lockTTL
	calls := 0
	dupChecked := make(chan struct{})
	claimed := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
			calls++
			start := time.Now()
			claimed <- start
			// The handler's work takes 1.6 x LockTTL; it also waits for the
			// duplicate check so a slow test machine cannot reorder the two.
			<-time.After(lockTTL * 16 / 10)
			<-dupChecked
			if ctx.Err() != nil {
				t.Errorf("handler context cancelled: %v", context.Cause(ctx))
			}
			return response(201, "paid"), true
		})
		done <- err
	}()
	start := <-claimed
	<-time.After(time.Until(start.Add(lockTTL * 125 / 100)))
	dup, dupErr := s.Do(context.Background(), r, neverRun(t))
	pttl := c.PTTL(context.Background(), s.key("tenant-a", "slow")).Val()
	close(dupChecked)
	err := <-done // the handler has returned: failing from here on leaks nothing
	if dupErr != nil || dup.Outcome != server.OutcomeInProgress {
		t.Fatalf("duplicate at 1.25 x LockTTL: %v, %v; want in-progress", dup.Outcome, dupErr)
	}
	if dup.RetryAfter <= 0 || dup.RetryAfter > lockTTL || pttl <= 0 {
		t.Fatalf("RetryAfter %v, PTTL %v: want the renewed lease's remaining time", dup.RetryAfter, pttl)
	}
	if err != nil {
		t.Fatalf("slow Do: %v", err)
	}
	if got := mustDo(t, s, r, neverRun(t)); got.Outcome != server.OutcomeReplayed {
		t.Fatalf("after the slow handler: %v, want replayed", got.Outcome)
	}
	if calls != 1 {
		t.Fatalf("handler ran %d times, want 1", calls)
	}
}

// When a renewal finds the claim taken by someone else, the handler's context
// is cancelled with ErrLeaseLost and nothing is recorded.
func TestRenewalFindsClaimLostCancelsHandler(t *testing.T) {
	t.Parallel()
	const lockTTL = 300 * time.Millisecond
	s, c := newTestStore(t)
	r := req("k", "fp")
	r.LockTTL = lockTTL
	key := s.key("tenant-a", "k")
	foreign := string(encodeClaim([tokenLen]byte{1, 2, 3}, "fp"))
	var cause error
	_, err := s.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
		if err := c.Set(ctx, key, foreign, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(10 * lockTTL):
			t.Error("handler context not cancelled after the claim was taken")
		}
		return response(200, "late"), true
	})
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("context cause = %v, want ErrLeaseLost", cause)
	}
	if !isNotRecorded(err) || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Do error = %v, want ErrNotRecorded and ErrLeaseLost", err)
	}
	if got := c.Get(context.Background(), key).Val(); got != foreign {
		t.Fatal("the holder that lost its lease changed the other owner's value")
	}
}

func TestRenewEvery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opt     time.Duration
		lockTTL time.Duration
		want    time.Duration
	}{
		{"default is a third", 0, 3 * time.Second, time.Second},
		{"configured", 100 * time.Millisecond, 3 * time.Second, 100 * time.Millisecond},
		{"capped at half the lock", 5 * time.Second, 2 * time.Second, time.Second},
		{"at least a millisecond", 0, time.Millisecond, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Store{cfg: config{renewInterval: tt.opt}}
			if got := s.renewEvery(tt.lockTTL); got != tt.want {
				t.Fatalf("renewEvery(%v) = %v, want %v", tt.lockTTL, got, tt.want)
			}
		})
	}
}
