package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/server"
)

// Regression: WithOpTimeout bounds every call, even with a client that does
// not honour context deadlines (go-redis's default): with Redis stalled, Do
// fails within the op timeout, not at the client's ReadTimeout. Before, the
// claim waited for the read timeout whatever WithOpTimeout said.
func TestOpTimeoutBoundsCallsOnAStalledRedis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		contextTimeouts bool
	}{
		{"client ignores deadlines", false},
		{"client honours deadlines", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startPrivateRedis(t)
			c := redis.NewClient(&redis.Options{Addr: srv.addr(), ReadTimeout: 30 * time.Second,
				WriteTimeout: 30 * time.Second, MaxRetries: -1, ContextTimeoutEnabled: tc.contextTimeouts})
			t.Cleanup(func() { _ = c.Close() })
			s := New(c, WithOpTimeout(200*time.Millisecond))
			if err := s.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			srv.pause()
			done := make(chan error, 1)
			go func() {
				_, err := s.Do(context.Background(), req("k", "fp"), neverRun(t))
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Do on a stalled Redis: no error")
				}
			case <-time.After(10 * time.Second):
				srv.resume()
				t.Fatal("Do on a stalled Redis still waiting 10 s in, with WithOpTimeout(200ms)")
			}
		})
	}
}

// lostReply is a go-redis hook that lets Redis run the first command whose
// script is sha, then loses its answer, as a connection cut after the
// request was read does.
type lostReply struct {
	sha  string
	lost atomic.Bool
}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && args[1] == h.sha && h.lost.CompareAndSwap(false, true) {
			err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
			cmd.SetErr(err)
		}
		return err
	}
}

func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Regression: Redis runs the claim but its answer is lost. Do fails (the
// middleware answers 503, "not processed; retry"), and the retry the 503
// invites runs the handler at once. Before, the claim stayed for its lease and
// grace (35 s and more with the defaults), so every retry got 409 past the
// default client's 30 s cap.
func TestLostClaimReplyDoesNotBlockTheRetry(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	hook := &lostReply{sha: claimScript.Hash()}
	c.AddHook(hook)
	s := New(c, WithPrefix(testPrefix(t, c)))
	r := req("k", "fp")
	r.LockTTL = server.DefaultLockTTL
	if _, err := s.Do(context.Background(), r, neverRun(t)); err == nil || !hook.lost.Load() {
		t.Fatalf("Do with the claim's answer lost: %v, want an error", err)
	}
	calls := 0
	got := mustDo(t, s, r, respond(&calls, response(201, "ok")))
	if got.Outcome != server.OutcomeExecuted || calls != 1 {
		t.Fatalf("retry after the lost answer: %v (ran %d times), want executed at once", got.Outcome, calls)
	}
}

// Ping answers nil while Redis serves, and an error, within the op timeout,
// while it is stalled or stopped.
func TestPingTellsWhenRedisCannotServe(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	s := New(srv.client(t), WithOpTimeout(200*time.Millisecond))
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with Redis up: %v", err)
	}
	srv.pause()
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("Ping with Redis stalled: nil, want an error")
	}
	srv.resume()
	srv.kill()
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("Ping with Redis stopped: nil, want an error")
	}
}

func TestMayHaveRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"timeout", context.DeadlineExceeded, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
		{"client closed", redis.ErrClosed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayHaveRun(tc.err); got != tc.want {
				t.Fatalf("mayHaveRun(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	// A Redis error reply: the script answered, so it did not claim.
	srv := startPrivateRedis(t)
	_, err := srv.client(t).Do(context.Background(), "NOSUCHCOMMAND").Result()
	if err == nil || mayHaveRun(err) {
		t.Fatalf("an error reply (%v): mayHaveRun true, want false", err)
	}
}
