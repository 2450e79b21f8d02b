// Command grpcpayments tells the double-charge story over gRPC:
//
//	go run ./examples/grpcpayments
//
// A payments service (idemgrpctest's Charge, which has no idempotency_level)
// runs on loopback. The fault is the same in each story: the first answer the
// server writes is lost, its connection cut as it goes out, after the charge
// was made.
//
//	(a) A plain client with a hand-rolled retry loop on Unavailable: the
//	    charge ran, the answer was lost, the loop sends it again, and the
//	    customer pays twice.
//	(b) idem's client interceptor in front of idem's server interceptor (the
//	    memory store): the retry carries the call's idempotency-key, and gets
//	    the recorded answer (trailer idempotent-replayed: true). One charge.
//	(c) The same key with another amount is refused: FailedPrecondition.
//
// The run takes well under a second.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
	"github.com/idemkit/idem/server/memstore"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcpayments:", err)
		os.Exit(1)
	}
}

// run tells the three stories on w.
func run(w io.Writer) error {
	plain, err := startService(false)
	if err != nil {
		return err
	}
	defer plain.stop()
	fmt.Fprintln(w, "(a) a plain client retrying Unavailable by hand, no key:")
	conn, err := grpc.NewClient(plain.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	for attempt := 1; attempt <= 3; attempt++ {
		out, err := idemgrpctest.Call(context.Background(), conn, idemgrpctest.Charge, "cus_a:20.00")
		fmt.Fprintf(w, "    attempt %d: %-12s %-24s payments of cus_a: %d\n", attempt, status.Code(err), out, plain.charges("cus_a"))
		if status.Code(err) != codes.Unavailable {
			break
		}
	}
	_ = conn.Close()

	safe, err := startService(true)
	if err != nil {
		return err
	}
	defer safe.stop()
	fmt.Fprintln(w, "(b) idem's interceptors on both sides:")
	conn, err = grpc.NewClient(safe.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), // one layer retries: idem's
		grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor(
			idem.WithOnRetry(func(_ context.Context, a idem.AttemptInfo) {
				fmt.Fprintf(w, "    attempt %d failed (%s), retrying with key %.8s\n", a.Number-1, codes.Code(a.Status), a.Key)
			}))))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx := idem.ContextWithKey(context.Background(), idem.KeyFor("grpcpayments", "order-1"))
	var trailer metadata.MD
	out, err := idemgrpctest.Call(ctx, conn, idemgrpctest.Charge, "cus_b:20.00", grpc.Trailer(&trailer))
	fmt.Fprintf(w, "    answer: %-12s %-24s replayed: %-5v payments of cus_b: %d\n", status.Code(err), out,
		idemgrpc.Replayed(trailer), safe.charges("cus_b"))

	fmt.Fprintln(w, "(c) the same key, another amount:")
	_, err = idemgrpctest.Call(ctx, conn, idemgrpctest.Charge, "cus_b:99.00")
	fmt.Fprintf(w, "    answer: %s (%s); payments of cus_b: %d\n", status.Code(err), status.Convert(err).Message(), safe.charges("cus_b"))
	return nil
}

// service is the payments service on loopback, with its ledger.
type service struct {
	addr   string
	srv    *grpc.Server
	mu     sync.Mutex
	ledger map[string]int // charges by customer
}

// startService starts the service, behind idem's server interceptor when
// protected; the first answer it writes is lost.
func startService(protected bool) (*service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lossy := &losingListener{Listener: ln}
	s := &service{addr: ln.Addr().String(), ledger: map[string]int{}}
	chain := []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		lossy.loseOnce() // the answer is written after this returns: the first one is lost
		return resp, err
	}}
	if protected {
		chain = append(chain, idemgrpc.UnaryServerInterceptor(memstore.New()))
	}
	s.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	idemgrpctest.Register(s.srv, func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		customer, _, _ := strings.Cut(in.GetValue(), ":")
		s.mu.Lock()
		s.ledger[customer]++
		s.mu.Unlock()
		return wrapperspb.String("charged " + in.GetValue()), nil
	})
	go func() { _ = s.srv.Serve(lossy) }()
	return s, nil
}

func (s *service) charges(customer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledger[customer]
}

func (s *service) stop() { s.srv.Stop() }

// losingListener's connections close at their next write once loseOnce has
// been called the first time: that write, the answer, is lost.
type losingListener struct {
	net.Listener
	armed, used atomic.Bool
}

func (l *losingListener) loseOnce() { l.armed.CompareAndSwap(false, true) }

func (l *losingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, l: l}, nil
}

type losingConn struct {
	net.Conn
	l *losingListener
}

func (c *losingConn) Write(b []byte) (int, error) {
	if c.l.armed.Load() && c.l.used.CompareAndSwap(false, true) {
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}
