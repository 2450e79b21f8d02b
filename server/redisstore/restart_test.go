package redisstore

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
)

// Private servers of these tests listen on loopback ports 7150-7199 (the
// range .ci/redis-topologies.sh leaves free), never elsewhere, moved by
// IDEM_PRIVATE_PORT_OFFSET.
var privatePorts = servicetest.NewPorts(7150, 7199)

// freeAddr returns a loopback address in the private range with a port nothing
// listens on now (servicetest.Ports: handed out in turn).
func freeAddr(t testing.TB) string {
	t.Helper()
	return privatePorts.Addr(t)
}

// privateRedis is a redis-server of the test's own. By default it keeps no
// data on disk, so a restart loses every key and every cached script; extra
// arguments (for example appendonly) change that. Its working dir is a
// temporary dir of the test, kept across restarts.
type privateRedis struct {
	t    *testing.T
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T, args ...string) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOrFail(t, "redis-server not in PATH (%v): install it (apt-get install redis-server) to run the restart tests", err)
	}
	_, p, _ := net.SplitHostPort(freeAddr(t))
	port, _ := strconv.Atoi(p)
	r := &privateRedis{t: t, port: port, dir: t.TempDir(), args: args}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *privateRedis) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

func (r *privateRedis) start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no"}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("private redis-server on %s did not come up", r.addr())
		}
		time.Sleep(5 * time.Millisecond) // polling for the server to accept connections
	}
}

func (r *privateRedis) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// pause stops the server (SIGSTOP): it keeps its connections and its data but
// answers nothing until resume, as a Redis stalled by the host or the kernel.
func (r *privateRedis) pause() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Fatalf("SIGSTOP redis-server: %v", err)
	}
	r.t.Cleanup(r.resume) // a test that fails while Redis is paused leaves it running for the kill
}

// resume lets a paused server go on (SIGCONT).
func (r *privateRedis) resume() {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

func (r *privateRedis) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.addr(), DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Redis restarts (losing its data, claim included) between the claim and the
// finish: nobody took the key meanwhile, so the response is still recorded,
// and a retry afterwards replays it instead of running the handler again.
func TestRedisRestartBetweenClaimAndFinishStillRecords(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	s := New(srv.client(t))
	r := req("k", "fp")
	r.LockTTL = 3 * time.Second

	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	calls := 0
	go func() {
		_, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			calls++
			close(started)
			<-release
			return response(201, "first"), true
		})
		done <- err
	}()
	<-started
	srv.kill()
	srv.start()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Do across a restart: %v, want the response recorded", err)
	}
	got := mustDo(t, s, r, neverRun(t))
	if got.Outcome != server.OutcomeReplayed || string(got.Response.Body) != "first" || calls != 1 {
		t.Fatalf("retry after the restart: %v %q (ran %d times); want the first response replayed", got.Outcome, got.Response.Body, calls)
	}
}

// Redis goes away while the handler runs and stays away: renewals fail until
// the lease would have expired, then the handler's context is cancelled and Do
// reports the response as not recorded.
func TestRedisDownCancelsHandlerAtLeaseExpiry(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	s := New(srv.client(t), WithOpTimeout(100*time.Millisecond))
	r := req("k", "fp")
	r.LockTTL = 400 * time.Millisecond

	var cause error
	var waited time.Duration
	_, err := s.Do(context.Background(), r, func(ctx context.Context) (*server.Response, bool) {
		srv.kill()
		start := time.Now()
		select {
		case <-ctx.Done():
			cause, waited = context.Cause(ctx), time.Since(start)
		case <-time.After(20 * r.LockTTL):
			t.Error("handler context not cancelled while Redis was down")
		}
		return response(201, "late"), true
	})
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("context cause = %v, want ErrLeaseLost", cause)
	}
	if waited > r.LockTTL+DefaultOpTimeout {
		t.Fatalf("cancelled %v after Redis went down, want about LockTTL (%v)", waited, r.LockTTL)
	}
	if !isNotRecorded(err) || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Do error = %v, want ErrNotRecorded and ErrLeaseLost", err)
	}
}
