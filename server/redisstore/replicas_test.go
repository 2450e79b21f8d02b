package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// With WithMinReplicas and no replica to acknowledge, the claim is released
// and Do fails before the handler runs (the middleware answers 503).
func TestMinReplicasUnacknowledgedClaimFailsClosed(t *testing.T) {
	t.Parallel()
	c := sharedRedis(t)
	if n := c.Wait(context.Background(), 1, time.Millisecond).Val(); n != 0 {
		t.Skipf("the test Redis has %d replicas; this test needs one without", n)
	}
	s := New(c, WithPrefix(testPrefix(t, c)), WithMinReplicas(1, 50*time.Millisecond))
	_, err := s.Do(context.Background(), req("k", "fp"), neverRun(t))
	if !errors.Is(err, ErrNotReplicated) || isNotRecorded(err) {
		t.Fatalf("Do: %v, want ErrNotReplicated before the handler ran", err)
	}
	if n := c.Exists(context.Background(), s.key("tenant-a", "k")).Val(); n != 0 {
		t.Fatal("the unacknowledged claim was left in Redis")
	}
}

// logHandler is a slog.Handler that sends each message on a channel.
type logHandler chan string

func (h logHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h logHandler) Handle(_ context.Context, r slog.Record) error { h <- r.Message; return nil }
func (h logHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h logHandler) WithGroup(string) slog.Handler                 { return h }

// waitLog waits (bounded) for a log message and returns it.
func waitLog(t *testing.T, logs logHandler, what string) string {
	t.Helper()
	select {
	case m := <-logs:
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no log message: %s", what)
		return ""
	}
}

// The claim was acknowledged, the handler ran, and then the replica stops
// answering: the record is not acknowledged in time. The caller still gets the
// handler's response (the effect happened), a warning is logged, and once the
// replica is back the store makes the record durable in the background.
func TestMinReplicasUnacknowledgedRecordAnswersAndSettles(t *testing.T) {
	t.Parallel()
	master := startPrivateRedis(t)
	replica := startPrivateRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	c := master.client(t)
	deadline := time.Now().Add(20 * time.Second)
	for c.Wait(context.Background(), 1, 100*time.Millisecond).Val() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the private replica never synchronised")
		}
	}
	logs := make(logHandler, 16)
	s := New(c, WithMinReplicas(1, time.Second), WithLogger(slog.New(logs)))
	r := req("k", "fp")

	calls := 0
	res, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
		calls++
		if err := replica.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		return response(201, "charged"), true
	})
	if err != nil || res.Outcome != server.OutcomeExecuted || string(res.Response.Body) != "charged" {
		t.Fatalf("Do: %+v, %v; want the handler's response", res, err)
	}
	if m := waitLog(t, logs, "the unacknowledged record"); m != "redisstore: record not acknowledged by the replicas in time; answering the handler's response and retrying in the background" {
		t.Fatalf("log %q", m)
	}
	if err := replica.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if m := waitLog(t, logs, "the background record"); m != "redisstore: response recorded in the background" {
		t.Fatalf("log %q", m)
	}
	if got := mustDo(t, s, r, neverRun(t)); got.Outcome != server.OutcomeReplayed || calls != 1 {
		t.Fatalf("retry: %v (ran %d times), want a replay", got.Outcome, calls)
	}
}

// Regression: a record that is on the master but that no replica
// acknowledges (the replica is gone for good) is retried in the background
// for a bounded time, then given up with a warning; the record stays on the
// master and a retry replays it. Before, the background WAITs went on until
// the record's TTL (24 h by default): two calls every 1.25 s per key.
func TestMinReplicasBackgroundRetriesAreBounded(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t) // no replica
	logs := make(logHandler, 16)
	s := New(srv.client(t), WithMinReplicas(1, 20*time.Millisecond), WithLogger(slog.New(logs)))
	s.cfg.settleReplicasFor = 300 * time.Millisecond
	ended := make(chan struct{})
	s.onSettled = func() { close(ended) }
	key := s.key("tenant-a", "k")
	claim := encodeClaim([tokenLen]byte{7}, "fp")
	if err := srv.client(t).Set(context.Background(), key, claim, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	go s.settle(context.Background(), key, claim, encodeRecord("fp", response(201, "ok")), time.Hour)
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the background retries still run 20 s in, with a bound of 300ms")
	}
	var last string
	for len(logs) > 0 {
		last = <-logs
	}
	if !strings.Contains(last, "giving up waiting for the replicas") {
		t.Fatalf("last log %q, want the reason it gave up", last)
	}
	s2 := New(srv.client(t)) // without WithMinReplicas: the record is there
	got := mustDo(t, s2, req("k", "fp"), neverRun(t))
	if got.Outcome != server.OutcomeReplayed {
		t.Fatalf("retry: %v, want the record on the master replayed", got.Outcome)
	}
}
