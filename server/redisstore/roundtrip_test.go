package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/server"
)

// commandCounter is a go-redis hook that counts the round trips (a command,
// or a pipeline of several), and the EVALSHA calls of each script.
type commandCounter struct {
	mu       sync.Mutex
	commands int
	scripts  map[string]int // by script name
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// scriptNames names the store's scripts by their SHA-1.
var scriptNames = map[string]string{claimScript.Hash(): "claim", finishScript.Hash(): "finish",
	renewScript.Hash(): "renew", releaseScript.Hash(): "release", chargeScript.Hash(): "charge",
	usageScript.Hash(): "usage", markScript.Hash(): "mark"}

// note counts cmd's script, if it is one; c.mu is held.
func (c *commandCounter) note(cmd redis.Cmder) {
	if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 {
		if sha, ok := args[1].(string); ok {
			c.scripts[scriptNames[sha]]++
		}
	}
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.commands++
		c.note(cmd)
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.commands++ // one round trip
		for _, cmd := range cmds {
			c.note(cmd)
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the counts since the last call and resets them.
func (c *commandCounter) take() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, s := c.commands, c.scripts
	c.commands, c.scripts = 0, map[string]int{}
	return n, s
}

// Round trips per outcome, counted on the wire: a first request costs exactly
// two (claim, then finish and the scope's charge in one pipeline) plus its
// renewals, a replay exactly one.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	counter := &commandCounter{scripts: map[string]int{}}
	s := New(c, WithPrefix(testPrefix(t, sharedRedis(t))))
	// Warm up: open the connection, check the eviction policy (once per
	// store) and load every script on the server, so the counts below are
	// steady-state (no NOSCRIPT fallback).
	if err := s.checkOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []*redis.Script{claimScript, finishScript, renewScript, releaseScript, chargeScript} {
		if err := sc.Load(context.Background(), c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A first request of its own: a pipeline may open a second connection
	// of the pool.
	mustDo(t, s, req("warm", "fp"), func(context.Context) (*server.Response, bool) { return response(201, "x"), true })
	c.AddHook(counter)

	const lockTTL = 600 * time.Millisecond
	slow := req("slow", "fp")
	slow.LockTTL = lockTTL
	tests := []struct {
		name     string
		req      server.Request
		run      server.RunFunc
		want     server.Outcome
		commands int // besides renewals
		renewals bool
	}{
		{"first request", req("k", "fp"), func(context.Context) (*server.Response, bool) { return response(201, "x"), true }, server.OutcomeExecuted, 2, false},
		{"replay", req("k", "fp"), neverRun(t), server.OutcomeReplayed, 1, false},
		{"mismatch", req("k", "other"), neverRun(t), server.OutcomeMismatch, 1, false},
		{"not kept", req("k5xx", "fp"), func(context.Context) (*server.Response, bool) { return response(500, ""), false }, server.OutcomeExecuted, 2, false},
		{"slow first request", slow, func(context.Context) (*server.Response, bool) {
			<-time.After(lockTTL) // three renew intervals: at least two renewals
			return response(201, "slow"), true
		}, server.OutcomeExecuted, 2, true},
		{"slow replay", slow, neverRun(t), server.OutcomeReplayed, 1, false},
	}
	for _, tt := range tests {
		counter.take()
		got := mustDo(t, s, tt.req, tt.run)
		n, scripts := counter.take()
		if got.Outcome != tt.want {
			t.Fatalf("%s: outcome %v, want %v", tt.name, got.Outcome, tt.want)
		}
		renewals := scripts["renew"]
		if tt.renewals != (renewals > 0) || n-renewals != tt.commands {
			t.Fatalf("%s: %d commands (%v), want %d plus renewals=%v", tt.name, n, scripts, tt.commands, tt.renewals)
		}
		t.Logf("%s: %d round trips (%v)", tt.name, n, scripts)
	}
}
