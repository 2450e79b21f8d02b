package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/internal/testkit/syncbuf"
)

// Loopback port ranges of the private servers these tests start and kill,
// moved by IDEM_PRIVATE_PORT_OFFSET.
var (
	privateRedisPorts    = servicetest.NewPorts(7200, 7209)
	privatePostgresPorts = servicetest.NewPorts(5450, 5459)
)

// readyTimeout bounds how long a private server may take to accept
// connections after a start or a restart (PostgreSQL replays its WAL first).
const readyTimeout = 20 * time.Second

// killable is a store server that a test kills (SIGKILL to its whole process
// group: the server and every child it has) and starts again on the same data.
type killable struct {
	name   string
	newCmd func() *exec.Cmd
	ready  func(ctx context.Context) error // succeeds once it accepts work
	cmd    *exec.Cmd
	waited chan struct{}
}

// start starts the server and returns once it is ready.
func (k *killable) start() error {
	k.cmd = k.newCmd()
	if k.cmd.SysProcAttr == nil {
		k.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	k.cmd.SysProcAttr.Setpgid = true
	out := &syncbuf.Buffer{}
	k.cmd.Stdout, k.cmd.Stderr = out, out
	if err := k.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", k.name, err)
	}
	waited := make(chan struct{})
	k.waited = waited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(waited) }(k.cmd)

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		err := k.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-waited:
			return fmt.Errorf("%s exited at start: %v\n%s", k.name, k.cmd.ProcessState, out.Tail(20))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %v\n%s", k.name, readyTimeout, err, out.Tail(20))
		case <-time.After(50 * time.Millisecond): // polling a process: nothing to wait on
		}
	}
}

// kill sends SIGKILL to the server's process group and waits for it to go.
func (k *killable) kill() error {
	if err := syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s: %w", k.name, err)
	}
	select {
	case <-k.waited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s still running 10s after SIGKILL", k.name)
	}
}

// stop ends the server at the end of the test: sig to the group, then SIGKILL.
func (k *killable) stop(sig syscall.Signal) {
	if k.cmd == nil || k.cmd.Process == nil || k.waited == nil {
		return
	}
	_ = syscall.Kill(-k.cmd.Process.Pid, sig)
	select {
	case <-k.waited:
		return
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	<-k.waited
}

// startPrivateRedis starts a redis-server of its own on a loopback port from
// 7200 to 7209, persisting every write before answering (appendonly yes,
// appendfsync always) in a temporary directory, and stops it when the test
// ends. It returns the server and its address.
func startPrivateRedis(t *testing.T) (*killable, string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		servicetest.Unreachable(t, "redis-server not found in PATH (%v): install Redis to run the store-kill soak", err)
	}
	dir := t.TempDir()
	addr := privateRedisPorts.Addr(t)
	_, port, _ := net.SplitHostPort(addr)
	k := &killable{
		name: "redis-server " + addr,
		newCmd: func() *exec.Cmd {
			return exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--dir", dir,
				"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
				"--protected-mode", "yes", "--maxmemory-policy", "noeviction")
		},
		ready: func(ctx context.Context) error {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			return c.Ping(ctx).Err()
		},
	}
	t.Cleanup(func() { k.stop(syscall.SIGTERM) })
	if err := k.start(); err != nil {
		t.Fatal(err)
	}
	return k, addr
}

// startPrivatePostgres creates a PostgreSQL cluster of its own
// (servicetest.InitPostgres), serves it on a loopback port from 5450 to 5459 with
// no Unix socket, and stops it and removes it when the test ends. It returns
// the server and the URL of its postgres database (user postgres, trust).
//
// Every process of the cluster is in one process group, so a kill takes the
// postmaster and its backends at once, as a crash of the machine would; the
// operating system keeps what was written, and the restart replays the WAL.
// fsync is off: a killed process loses nothing the kernel already has.
func startPrivatePostgres(t *testing.T) (*killable, string) {
	t.Helper()
	cluster := servicetest.InitPostgres(t, "idem-e2e-pg-")
	_, port, _ := net.SplitHostPort(privatePostgresPorts.Addr(t))
	url := cluster.URL(port)
	k := &killable{
		name: "postgres 127.0.0.1:" + port,
		newCmd: func() *exec.Cmd {
			return cluster.Command(port, "-c", "max_connections=60", "-c", "dynamic_shared_memory_type=mmap")
		},
		ready: func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			return conn.Close(ctx)
		},
	}
	t.Cleanup(func() { k.stop(syscall.SIGINT) }) // fast shutdown
	if err := k.start(); err != nil {
		t.Fatal(err)
	}
	return k, url
}
