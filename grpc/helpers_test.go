package idemgrpc_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
	"github.com/idemkit/idem/server"
)

// losingListener is a server's listener whose connections, once Lose is
// called, close at their next write instead of writing it: the answer the
// server was about to send is lost with the connection, after the handler
// ran, as when a network drops.
type losingListener struct {
	net.Listener
	lose atomic.Int64 // writes to lose, one per connection cut
}

func (l *losingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, l: l}, nil
}

// Lose has the next write of a connection cut it.
func (l *losingListener) Lose() { l.lose.Add(1) }

type losingConn struct {
	net.Conn
	l *losingListener
}

func (c *losingConn) Write(b []byte) (int, error) {
	for {
		n := c.l.lose.Load()
		if n == 0 {
			return c.Conn.Write(b)
		}
		if c.l.lose.CompareAndSwap(n, n-1) {
			_ = c.Conn.Close()
			return 0, net.ErrClosed
		}
	}
}

// testServer is the demo service behind idem's server interceptor, on a
// real listener.
type testServer struct {
	addr  string
	lis   *losingListener
	buf   *bufconn.Listener // for a bufconn server; nil over TCP
	execs atomic.Int64      // handler runs
	mu    sync.Mutex
	h     idemgrpctest.Handler
	// outer, when set, runs around idem's interceptor (in front of it).
	outer grpc.UnaryServerInterceptor
}

// handler returns the server's handler: it counts the run and calls h.
func (s *testServer) handle(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	s.execs.Add(1)
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if h == nil {
		return wrapperspb.String("charged " + in.GetValue()), nil
	}
	return h(ctx, method, in)
}

// setHandler makes h the handler of the calls from now on.
func (s *testServer) setHandler(h idemgrpctest.Handler) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

// startServer starts the demo service over TCP on loopback, protected with
// store (nil: no server interceptor), until the test ends.
func startServer(t testing.TB, store server.Store, opts ...idemgrpc.ServerOption) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{lis: &losingListener{Listener: ln}, addr: ln.Addr().String()}
	s.serve(t, s.lis, store, opts)
	return s
}

// startBufServer starts the demo service over an in-memory connection.
func startBufServer(t testing.TB, store server.Store, opts ...idemgrpc.ServerOption) *testServer {
	t.Helper()
	buf := bufconn.Listen(1 << 20)
	s := &testServer{lis: &losingListener{Listener: buf}, buf: buf, addr: "passthrough:///bufnet"}
	s.serve(t, s.lis, store, opts)
	return s
}

func (s *testServer) serve(t testing.TB, ln net.Listener, store server.Store, opts []idemgrpc.ServerOption) {
	var chain []grpc.UnaryServerInterceptor
	chain = append(chain, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if s.outer != nil {
			return s.outer(ctx, req, info, h)
		}
		return h(ctx, req)
	})
	if store != nil {
		chain = append(chain, idemgrpc.UnaryServerInterceptor(store, opts...))
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	idemgrpctest.Register(srv, s.handle)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

// dial returns a client of s with idem's interceptor, under opts.
func (s *testServer) dial(t testing.TB, opts ...idem.Option) *grpc.ClientConn {
	t.Helper()
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor(opts...))}
	cc, err := grpc.NewClient(s.addr, append(dopts, s.bufDialer()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

type spbStatus = spb.Status

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// bufDialer is the dial option that reaches a bufconn server, none for TCP.
func (s *testServer) bufDialer() []grpc.DialOption {
	if s.buf == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return s.buf.DialContext(ctx)
	})}
}
