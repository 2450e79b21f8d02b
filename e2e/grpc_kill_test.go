package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/redisstore"
)

// The environment of a gRPC server process: the test binary, re-executed by
// TestGRPCServerKilledMidHandler, serves the payments service behind idem's
// server interceptor instead of running tests (see TestMain).
const (
	grpcChildStore  = "IDEM_E2E_GRPC_STORE"  // "postgres" or "redis"
	grpcChildListen = "IDEM_E2E_GRPC_LISTEN" // the address to listen on
	grpcChildName   = "IDEM_E2E_GRPC_NAME"   // the store's table or key prefix
	grpcChildHang   = "IDEM_E2E_GRPC_HANG"   // "1": each handler blocks after its effect
)

// grpcKillLockTTL is the child's lock TTL (WithLockTTL): the Redis lease a
// killed process leaves behind ends this long after its last renewal.
const grpcKillLockTTL = 2 * time.Second

// runGRPCChild is the server process: it prints "listening ADDR" once it
// listens and "effect CUSTOMER" as each handler has made its effect (a
// payment written in the store's transaction on PostgreSQL; a counter
// incremented in Redis after server.BeginEffect, an effect outside the
// store, as a payment provider's would be). It returns only on failure.
func runGRPCChild() error {
	ctx := context.Background()
	name, hang := os.Getenv(grpcChildName), os.Getenv(grpcChildHang) == "1"
	var store server.Store
	var effect func(ctx context.Context, customer string) error
	switch kind := os.Getenv(grpcChildStore); kind {
	case "postgres":
		pool, err := pgxpool.New(ctx, servicetest.PostgresURL())
		if err != nil {
			return err
		}
		store = pgstore.New(pool, pgstore.WithTable(name))
		insert := "INSERT INTO " + pgx.Identifier{name + "_payments"}.Sanitize() + " (customer) VALUES ($1)"
		effect = func(ctx context.Context, customer string) error {
			tx := pgstore.Tx(ctx)
			if tx == nil {
				return errors.New("no store transaction in the handler's context")
			}
			_, err := tx.Exec(ctx, insert, customer)
			return err
		}
	case "redis":
		client := redis.NewClient(&redis.Options{Addr: servicetest.RedisAddr()})
		store = redisstore.New(client, redisstore.WithPrefix(name))
		effect = func(ctx context.Context, customer string) error {
			if err := server.BeginEffect(ctx); err != nil {
				return err
			}
			return client.Incr(ctx, name+"payments:"+customer).Err()
		}
	default:
		return fmt.Errorf("%s=%q: want postgres or redis", grpcChildStore, kind)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(store,
		idemgrpc.WithLockTTL(grpcKillLockTTL), idemgrpc.WithInProgressWait(0))))
	idemgrpctest.Register(srv, func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if err := effect(ctx, in.GetValue()); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		fmt.Println("effect", in.GetValue())
		if hang {
			<-ctx.Done() // until the process is killed
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return wrapperspb.String("charged " + in.GetValue()), nil
	})
	ln, err := net.Listen("tcp", os.Getenv(grpcChildListen))
	if err != nil {
		return err
	}
	fmt.Println("listening", ln.Addr())
	return srv.Serve(ln)
}

// grpcChild is a running server process and the lines it prints.
type grpcChild struct {
	cmd    *exec.Cmd
	addr   string
	lines  chan string // "effect CUSTOMER" lines; closed when it exits
	exited chan struct{}
	seen   []string // the lines read from lines so far
}

// startGRPCChild starts a server process on addr ("127.0.0.1:0" for any
// port) and returns once it listens; the test's end kills it.
func startGRPCChild(t *testing.T, kind, name, addr string, hang bool) *grpcChild {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	h := "0"
	if hang {
		h = "1"
	}
	cmd.Env = append(os.Environ(), grpcChildStore+"="+kind, grpcChildListen+"="+addr, grpcChildName+"="+name, grpcChildHang+"="+h)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &grpcChild{cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		defer close(c.exited)
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				listening <- a
				continue
			}
			c.lines <- sc.Text()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(c.kill)
	select {
	case c.addr = <-listening:
	case <-c.exited:
		t.Fatalf("the %s server process exited before it listened", kind)
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s server process does not listen after 30s", kind)
	}
	return c
}

// kill kills the process (SIGKILL: no handler, no deferred call runs) and
// waits for it to be gone.
func (c *grpcChild) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// effects returns every effect line the process printed, once it has
// exited.
func (c *grpcChild) effects() []string {
	<-c.exited
	for l := range c.lines {
		c.seen = append(c.seen, l)
	}
	return c.seen
}

// grpcReason returns the idem ErrorInfo reason of err's status, "" if none.
func grpcReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == idemgrpc.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// TestGRPCServerKilledMidHandler kills (SIGKILL) a gRPC server process while
// a call's handler has made its effect and not answered, restarts it on the
// same address, and lets the client's retries of the one logical call, with
// its one key, meet the new process; then calls once more with that key.
//
// On PostgreSQL the payment was written in the store's transaction, which
// the kill rolls back together with the claim: the retry runs the handler,
// and exactly one payment is ever committed (the retry's), answered to the
// call and replayed to the next. On Redis the handler began its effect
// (server.BeginEffect) outside the store: once the dead process's lease and
// grace are over, the key is outcome-unknown, the call ends with Unknown
// (never retried) and the handler never runs a second time.
func TestGRPCServerKilledMidHandler(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cases := []struct {
		kind  string
		setup func(t *testing.T) (name string, payments func(customer string) int)
	}{
		{"postgres", setupGRPCKillPostgres},
		{"redis", setupGRPCKillRedis},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			name, payments := c.setup(t)
			customer := "cus_kill_" + randomSuffix()
			key := idem.KeyFor("e2e-grpc-kill", customer)

			first := startGRPCChild(t, c.kind, name, "127.0.0.1:0", true)
			reports := make(chan idem.Report, 2) // the call's and the one after it
			cc, err := grpc.NewClient(first.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
				grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond,
					Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond}, MinConnectTimeout: 2 * time.Second}),
				grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor(
					idem.WithMaxAttempts(100), idem.WithBackoff(50*time.Millisecond, 500*time.Millisecond),
					idem.WithMaxElapsed(30*time.Second),
					idem.WithOnDone(func(_ context.Context, r idem.Report) {
						reports <- r
					}))))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()

			type result struct {
				answer string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				a, err := idemgrpctest.Call(idem.ContextWithKey(context.Background(), key), cc, idemgrpctest.Charge, customer)
				done <- result{a, err}
			}()
			select {
			case l, ok := <-first.lines:
				first.seen = append(first.seen, l)
				if !ok || l != "effect "+customer {
					t.Fatalf("the first process printed %q (open %v), want its handler's effect", l, ok)
				}
			case r := <-done:
				t.Fatalf("the call ended before its handler's effect: %q, %v", r.answer, r.err)
			case <-time.After(30 * time.Second):
				t.Fatal("the handler made no effect in 30s")
			}
			first.kill()
			second := startGRPCChild(t, c.kind, name, first.addr, false)

			var r result
			select {
			case r = <-done:
			case <-time.After(45 * time.Second):
				t.Fatal("the call did not end within 45s of the kill")
			}
			report := <-reports
			t.Logf("%s: the call ended after %d attempts in %v: %q, %v", c.kind, report.Attempts,
				report.Elapsed.Round(time.Millisecond), r.answer, r.err)
			if report.Attempts < 2 {
				t.Errorf("%d attempts; the kill should have cost the first", report.Attempts)
			}

			// The same key once more, on the new process.
			var trailer metadata.MD
			again, againErr := idemgrpctest.Call(idem.ContextWithKey(context.Background(), key), cc, idemgrpctest.Charge,
				customer, grpc.Trailer(&trailer))
			second.kill()
			firstRuns, secondRuns := len(first.effects()), len(second.effects())

			switch c.kind {
			case "postgres":
				if r.err != nil || r.answer != "charged "+customer {
					t.Errorf("the call got %q, %v; want the retry's answer", r.answer, r.err)
				}
				if againErr != nil || again != r.answer || !idemgrpc.Replayed(trailer) {
					t.Errorf("the same key again got %q, %v (replayed %v); want the recorded answer replayed",
						again, againErr, idemgrpc.Replayed(trailer))
				}
				if firstRuns != 1 || secondRuns != 1 {
					t.Errorf("handler runs: %d in the killed process, %d after; want 1 rolled back and 1 committed", firstRuns, secondRuns)
				}
			case "redis":
				if status.Code(r.err) != codes.Unknown || grpcReason(r.err) != idemgrpc.ReasonOutcomeUnknown {
					t.Errorf("the call got %q, %v; want Unknown %s", r.answer, r.err, idemgrpc.ReasonOutcomeUnknown)
				}
				if status.Code(againErr) != codes.Unknown || grpcReason(againErr) != idemgrpc.ReasonOutcomeUnknown {
					t.Errorf("the same key again got %q, %v; want Unknown %s", again, againErr, idemgrpc.ReasonOutcomeUnknown)
				}
				if firstRuns != 1 || secondRuns != 0 {
					t.Errorf("handler runs: %d in the killed process, %d after; want 1 and never a second", firstRuns, secondRuns)
				}
			}
			if n := payments(customer); n != 1 {
				t.Errorf("%d payments for %s, want exactly 1", n, customer)
			}
		})
	}
}

// setupGRPCKillPostgres makes the store's table and a payments table beside
// it, both dropped when the test ends.
func setupGRPCKillPostgres(t *testing.T) (string, func(string) int) {
	pool, name := newPostgresPool(t, "e2e_grpc_kill_", 0, "_payments")
	payments := pgx.Identifier{name + "_payments"}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pgstore.New(pool, pgstore.WithTable(name)).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+payments+" (customer text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return name, func(customer string) int {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+payments+" WHERE customer = $1", customer).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// setupGRPCKillRedis picks a key prefix whose keys are deleted when the test
// ends.
func setupGRPCKillRedis(t *testing.T) (string, func(string) int) {
	client, prefix := newRedisClient(t, "idem-e2e:grpc-kill:", 0)
	return prefix, func(customer string) int {
		n, err := client.Get(context.Background(), prefix+"payments:"+customer).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n
	}
}
