package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
)

// The gRPC soak's load: fewer operations than the HTTP soak's (each lost
// answer costs a connection, which every call on it shares).
const (
	grpcSoakClients  = 10
	grpcSoakOps      = 20 // logical payments per client
	grpcSoakInFlight = 5
)

// cuttingListener is a gRPC server's listener whose connections can be
// told to lose what they write next: Cut(addr) has the connection from the
// client at addr close at its next write, the answer being written.
type cuttingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*cuttingConn
}

func (l *cuttingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &cuttingConn{Conn: c}
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = cc
	l.mu.Unlock()
	return cc, nil
}

func (l *cuttingListener) Cut(addr string) {
	l.mu.Lock()
	c := l.conns[addr]
	l.mu.Unlock()
	if c != nil {
		c.cut.Store(true)
	}
}

type cuttingConn struct {
	net.Conn
	cut atomic.Bool
}

func (c *cuttingConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

// grpcSoakServer is the payments service behind idem's server interceptor on
// a store, with faults in front of it: 20% of calls are answered Unavailable
// (with a pushback) before anything runs, and 20% lose their answer after it
// was recorded, their connection cut as the answer is written.
type grpcSoakServer struct {
	addr   string
	mu     sync.Mutex
	ledger map[string]int
	faults atomic.Int64
}

func (s *grpcSoakServer) payments(customer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if customer == "" {
		n := 0
		for _, v := range s.ledger {
			n += v
		}
		return n
	}
	return s.ledger[customer]
}

func startGRPCSoakServer(t *testing.T, sc storeCase) *grpcSoakServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &cuttingListener{Listener: ln, conns: map[string]*cuttingConn{}}
	s := &grpcSoakServer{addr: ln.Addr().String(), ledger: map[string]int{}}
	chaos := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		switch r := rand.Float64(); {
		case r < soakFailRate:
			s.faults.Add(1)
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "20"))
			return nil, status.Error(codes.Unavailable, "chaos: not processed")
		case r < soakFailRate+soakDropRate:
			resp, err := h(ctx, req)
			if p, ok := peer.FromContext(ctx); ok {
				s.faults.Add(1)
				lis.Cut(p.Addr.String())
			}
			return resp, err
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(chaos,
		idemgrpc.UnaryServerInterceptor(sc.open(t), idemgrpc.WithInProgressWait(5*time.Second))))
	idemgrpctest.Register(srv, func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		customer := in.GetValue()
		s.mu.Lock()
		s.ledger[customer]++
		s.mu.Unlock()
		return wrapperspb.String("charged " + customer), nil
	})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return s
}

// grpcSoakOp is how one logical payment over gRPC ended.
type grpcSoakOp struct {
	customer string
	err      error
	attempts int
	elapsed  time.Duration
}

// runGRPCSoak runs customers' payments over grpcSoakClients connections.
func runGRPCSoak(t *testing.T, addr string, customers []string) []grpcSoakOp {
	out := make([]grpcSoakOp, len(customers))
	var wg sync.WaitGroup
	for c := range grpcSoakClients {
		var mu sync.Mutex
		attempts := map[string]int{}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
			grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor(
				idem.WithMaxAttempts(soakMaxAttempts), idem.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
				idem.WithAttemptTimeout(3*time.Second), idem.WithMaxElapsed(soakCap),
				idem.WithOnDone(func(_ context.Context, r idem.Report) {
					mu.Lock()
					attempts[r.Key] = r.Attempts
					mu.Unlock()
				}))))
		if err != nil {
			t.Fatal(err)
		}
		jobs := make(chan int)
		var cwg sync.WaitGroup
		for range grpcSoakInFlight {
			cwg.Go(func() {
				for i := range jobs {
					key := idem.KeyFor("e2e-grpc-soak", customers[i])
					start := time.Now()
					answer, err := idemgrpctest.Call(idem.ContextWithKey(context.Background(), key), cc, idemgrpctest.Charge, customers[i])
					o := grpcSoakOp{customer: customers[i], err: err, elapsed: time.Since(start)}
					if err == nil && answer != "charged "+customers[i] {
						o.err = fmt.Errorf("answer %q", answer)
					}
					mu.Lock()
					o.attempts = attempts[key]
					mu.Unlock()
					out[i] = o
				}
			})
		}
		wg.Go(func() {
			for i := c; i < len(customers); i += grpcSoakClients {
				jobs <- i
			}
			close(jobs)
			cwg.Wait()
			_ = cc.Close()
		})
	}
	wg.Wait()
	return out
}

// TestGRPCSoak is TestSoak over gRPC, on each store: 10 clients × 20 logical
// payments (5 in flight per client) while 20% of calls are answered
// Unavailable before anything runs and 20% lose their recorded answer with
// their connection. No customer is ever charged twice; every call ends
// within its cap, with the answer or the last Unavailable; the ones that did
// not succeed, run again with their keys, end charged exactly once.
func TestGRPCSoak(t *testing.T) {
	t.Parallel()
	for _, sc := range storeCases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s := startGRPCSoakServer(t, sc)
			customers := make([]string, grpcSoakClients*grpcSoakOps)
			for i := range customers {
				customers[i] = fmt.Sprintf("cus_%02d_%02d", i%grpcSoakClients, i/grpcSoakClients)
			}
			check := func(ops []grpcSoakOp) (again []string) {
				for _, o := range ops {
					if o.elapsed > soakCap+soakSlack {
						t.Errorf("%s: ended after %v, past its cap of %v", o.customer, o.elapsed, soakCap)
					}
					if o.attempts < 1 || o.attempts > soakMaxAttempts {
						t.Errorf("%s: %d attempts, want 1 to %d", o.customer, o.attempts, soakMaxAttempts)
					}
					if code := status.Code(o.err); o.err != nil && code != codes.Unavailable && code != codes.DeadlineExceeded {
						t.Errorf("%s: ended with %v, want success or the last Unavailable", o.customer, o.err)
					}
					switch n := s.payments(o.customer); {
					case o.err == nil && n != 1:
						t.Errorf("%s: succeeded with %d payments, want 1", o.customer, n)
					case n > 1:
						t.Errorf("%s: %d payments, want at most 1", o.customer, n)
					}
					if o.err != nil {
						again = append(again, o.customer)
					}
				}
				return again
			}
			start := time.Now()
			again := check(runGRPCSoak(t, s.addr, customers))
			t.Logf("%s store: %d calls in %v, %d faults injected, %d ended without success",
				sc.name, len(customers), time.Since(start).Round(time.Millisecond), s.faults.Load(), len(again))
			if s.faults.Load() == 0 {
				t.Fatal("no fault fired")
			}
			for round := 1; len(again) > 0; round++ {
				if round > soakReruns {
					t.Fatalf("%d calls still without success after %d re-runs", len(again), soakReruns)
				}
				again = check(runGRPCSoak(t, s.addr, again))
			}
			for _, c := range customers {
				if n := s.payments(c); n != 1 {
					t.Errorf("%s: %d payments, want exactly 1", c, n)
				}
			}
			if n := s.payments(""); n != len(customers) {
				t.Errorf("ledger holds %d payments for %d calls", n, len(customers))
			}
		})
	}
}
