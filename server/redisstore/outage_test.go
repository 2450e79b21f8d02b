package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// Regression (issue 12.1): Redis is killed (appendfsync always) while the
// handler is past its business write, so the response cannot be recorded, then
// restarted. Do reports ErrNotRecorded; the claim is neither released nor left
// to expire into a second run: the store records the response in the
// background once Redis is back, and the retry replays it. Before, the claim
// expired after LockTTL and the retry charged again.
func TestRedisKilledAfterTheWriteDoesNotRunTwice(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	s := New(srv.client(t), WithOpTimeout(500*time.Millisecond))
	r := req("k", "fp")
	r.LockTTL = 3 * time.Second // the outage below is far shorter than the lease

	var effects atomic.Int32
	wrote, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			effects.Add(1) // the business write
			close(wrote)
			<-release
			return response(201, "charged once"), true
		})
		done <- err
	}()
	<-wrote
	srv.kill()
	close(release)
	if err := <-done; !isNotRecorded(err) {
		t.Fatalf("Do with Redis down after the write: %v, want an error wrapping ErrNotRecorded", err)
	}
	srv.start()

	// The client retries, as it would after the outcome-unknown answer, for
	// longer than the lease: every answer must be the first run's.
	retry := r
	retry.Wait = time.Second
	deadline := time.Now().Add(3 * r.LockTTL)
	for {
		got, err := s.Do(context.Background(), retry, func(context.Context) (*server.Response, bool) {
			effects.Add(1)
			return response(201, "charged twice"), true
		})
		if err == nil && got.Outcome == server.OutcomeReplayed {
			if string(got.Response.Body) != "charged once" {
				t.Fatalf("replay %q, want the first run's response", got.Response.Body)
			}
			break
		}
		if err == nil && got.Outcome != server.OutcomeInProgress {
			t.Fatalf("retry: %v, want the first run's response replayed (the handler ran again)", got.Outcome)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replay within %v (last %v, %v)", 3*r.LockTTL, got.Outcome, err)
		}
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// The background recording gives up, logging why, when another owner holds
// the key, and never overwrites it.
func TestSettleNeverOverwritesAnotherOwner(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	var logs syncBuffer
	s.cfg.logger = slog.New(slog.NewTextHandler(&logs, nil))
	key := s.key("tenant-a", "k")
	other := string(encodeClaim([tokenLen]byte{9}, "fp"))
	if err := c.Set(context.Background(), key, other, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	mine := encodeClaim([tokenLen]byte{1}, "fp")
	s.settle(context.Background(), key, mine, encodeRecord("fp", response(201, "x")), time.Hour)
	if got := c.Get(context.Background(), key).Val(); got != other {
		t.Fatal("settle overwrote another owner's claim")
	}
	if !strings.Contains(logs.String(), "another owner holds the key") {
		t.Fatalf("log %q does not say why it gave up", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Regression (issue 12.2): a Redis that can evict records (every policy but
// noeviction, under maxmemory) is refused by Check and by Do before the
// handler runs, unless WithEvictionAllowed; noeviction is accepted.
func TestEvictionPolicyRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy string
		safe   bool
	}{
		{"allkeys-lru", false},
		{"volatile-lru", false},
		{"volatile-ttl", false},
		{"allkeys-random", false},
		{"noeviction", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			srv := startPrivateRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", tc.policy)
			c := srv.client(t)
			s := New(c)
			err := s.Check(context.Background())
			_, doErr := s.Do(context.Background(), req("k", "fp"), func(context.Context) (*server.Response, bool) {
				if !tc.safe {
					t.Error("the handler ran on a Redis that can evict its record")
				}
				return response(201, "ok"), true
			})
			if tc.safe {
				if err != nil || doErr != nil {
					t.Fatalf("Check %v, Do %v; want both to pass", err, doErr)
				}
				return
			}
			for _, e := range []error{err, doErr} {
				if !errors.Is(e, ErrEvictionPolicy) || !strings.Contains(e.Error(), tc.policy) ||
					!strings.Contains(e.Error(), "WithEvictionAllowed") {
					t.Fatalf("error %v, want ErrEvictionPolicy naming %s and the way to opt in", e, tc.policy)
				}
			}
			allowed := New(c, WithEvictionAllowed())
			if err := allowed.Check(context.Background()); err != nil {
				t.Fatalf("Check with WithEvictionAllowed: %v", err)
			}
			calls := 0
			if got := mustDo(t, allowed, req("k", "fp"), respond(&calls, response(201, "ok"))); got.Outcome != server.OutcomeExecuted {
				t.Fatalf("Do with WithEvictionAllowed: %v", got.Outcome)
			}
		})
	}
}

// A Redis that refuses CONFIG (renamed away, as managed services do) cannot
// be checked: the store warns and works.
func TestEvictionPolicyUncheckableWarns(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t, "--rename-command", "CONFIG", "")
	var logs syncBuffer
	s := New(srv.client(t), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v, want a pass with a warning", err)
	}
	if !strings.Contains(logs.String(), "cannot read maxmemory-policy") {
		t.Fatalf("log %q, want a warning", logs.String())
	}
	calls := 0
	if got := mustDo(t, s, req("k", "fp"), respond(&calls, response(201, "ok"))); got.Outcome != server.OutcomeExecuted {
		t.Fatalf("Do: %v", got.Outcome)
	}
}
