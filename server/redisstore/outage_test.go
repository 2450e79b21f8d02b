package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/syncbuf"
	"github.com/idemkit/idem/server"
)

// Regression (issue 12.1): Redis is killed (appendfsync always) while the
// handler is past its business write, so the response cannot be recorded, and
// restarted after the claim's lease has ended. Do reports ErrNotRecorded; the
// claim is neither released nor left to expire into a second run. The owner
// stays cut off from Redis a little longer than everyone else (a hook holds
// its commands until the retry has had its first look): the retry, from
// another instance, finds the claim, may not take it before the grace has
// passed with Redis up, and waits; the owner's background finish, let through,
// records the response; the retry replays it. Before, the claim had expired
// with its lease and the retry charged again.
func TestRedisKilledAfterTheWriteDoesNotRunTwice(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	ownerClient := srv.client(t)
	cut := &cutOff{}
	ownerClient.AddHook(cut)
	s := New(ownerClient, WithOpTimeout(500*time.Millisecond))
	other := New(srv.client(t)) // another instance of the server, where the retry lands
	var once sync.Once
	other.onPoll = func() { once.Do(cut.reconnect) } // the retry is waiting: let the owner back
	t.Cleanup(cut.reconnect)
	r := req("k", "fp")
	r.LockTTL = 600 * time.Millisecond

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
	cut.disconnect()
	time.Sleep(r.LockTTL) // the outage outlasts the lease: the passing of time is what is tested
	srv.start()

	retry := r
	retry.Wait = 3 * grace(r.LockTTL)
	got, err := other.Do(context.Background(), retry, func(context.Context) (*server.Response, bool) {
		effects.Add(1)
		return response(201, "charged twice"), true
	})
	if err != nil || got.Outcome != server.OutcomeReplayed || string(got.Response.Body) != "charged once" {
		t.Fatalf("retry: %+v, %v; want the first run's response replayed", got, err)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// cutOff is a go-redis hook that holds every command while disconnected.
type cutOff struct {
	mu   sync.Mutex
	gate chan struct{} // nil: connected
}

func (c *cutOff) disconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate == nil {
		c.gate = make(chan struct{})
	}
}

func (c *cutOff) reconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
}

func (c *cutOff) wait() {
	c.mu.Lock()
	g := c.gate
	c.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (c *cutOff) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cutOff) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.wait(); return next(ctx, cmd) }
}

func (c *cutOff) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.wait(); return next(ctx, cmds) }
}

// The background recording gives up, logging why, when another owner holds
// the key, and never overwrites it.
func TestSettleNeverOverwritesAnotherOwner(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	var logs syncbuf.Buffer
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
	var logs syncbuf.Buffer
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

// A claim whose lease ended is not taken at once (its owner may only have been
// cut off from Redis): the first claimant marks it suspect, the owner can
// still renew or record it, and only after a whole grace with no word from the
// owner does a claimant take the key and run.
func TestExpiredClaimTakeoverNeedsProof(t *testing.T) {
	t.Parallel()
	owner := encodeClaim([tokenLen]byte{42}, "fp")
	expired := encodeLeasedClaim([tokenLen]byte{42}, "0000000000001", "0000000000000", "fp") // deadline long past
	for _, tc := range []struct {
		name  string
		owner func(t *testing.T, s *Store, key string) // what the owner does after the mark
		want  server.Outcome
	}{
		{"owner gone", func(*testing.T, *Store, string) {}, server.OutcomeExecuted},
		{"owner records", func(t *testing.T, s *Store, key string) {
			if err := s.record(context.Background(), key, owner, encodeRecord("fp", response(201, "owner's")), time.Hour, nil); err != nil {
				t.Fatalf("the owner's finish after the mark: %v", err)
			}
		}, server.OutcomeReplayed},
		{"owner renews", func(t *testing.T, s *Store, key string) {
			n, err := renewScript.Run(context.Background(), s.client, []string{key}, owner, 10_000, 3_600_000).Int64()
			if err != nil || n != 1 {
				t.Fatalf("the owner's renewal after the mark: %d, %v", n, err)
			}
		}, server.OutcomeInProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c := newTestStore(t)
			key := s.key("tenant-a", "k")
			if err := c.Set(context.Background(), key, expired, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			r := req("k", "fp")
			r.LockTTL = time.Second
			first, err := s.Do(context.Background(), r, neverRun(t))
			if err != nil || first.Outcome != server.OutcomeInProgress || first.RetryAfter <= 0 || first.RetryAfter > grace(r.LockTTL) {
				t.Fatalf("first look at the expired claim: %+v, %v; want in-progress for the grace", first, err)
			}
			e, err := decodeEntry([]byte(c.Get(context.Background(), key).Val()))
			if err != nil || e.token != [tokenLen]byte{42} || e.suspect == "0000000000000" {
				t.Fatalf("after the first look: %+v, %v; want the owner's claim marked suspect", e, err)
			}
			tc.owner(t, s, key)

			r.Wait = 3 * grace(r.LockTTL)
			calls := 0
			got := mustDo(t, s, r, respond(&calls, response(201, "taken over")))
			if got.Outcome != tc.want {
				t.Fatalf("after the grace: %v, want %v", got.Outcome, tc.want)
			}
			if tc.want != server.OutcomeExecuted && calls != 0 {
				t.Fatalf("the handler ran %d times although the owner spoke up", calls)
			}
		})
	}
}
