package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	grpcretry "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
	"github.com/idemkit/idem/server/memstore"
)

// The callers of section 9, a unary gRPC call's cost on the success path:
// what stands between a client and a gRPC server on loopback TCP that
// answers every call.
const (
	// GRPCBare: no interceptor on either side: the baseline.
	GRPCBare = "bare call"
	// GRPCBareKeyed: no interceptor, and the caller puts a new key (a UUID)
	// in each call's metadata: what sending a key costs on the wire, and
	// the server's reading of it, which any keyed call pays.
	GRPCBareKeyed = "bare call, a new key in its metadata"
	// GRPCMiddleware: go-grpc-middleware's retry interceptor
	// (interceptors/retry), with retries on (WithMax(3); its defaults
	// otherwise: Unavailable and ResourceExhausted, 50 ms linear backoff).
	// Without WithMax it does nothing at all.
	GRPCMiddleware = "go-grpc-middleware retry"
	// GRPCIdemClient: idem's client interceptor on its defaults: a key
	// generated for each call, the retry engine, the Transport's own budget.
	GRPCIdemClient = "idem client"
	// GRPCIdemBoth: idem's client and server interceptors, the memory store:
	// each call a first execution (the claim, the handler, the record).
	GRPCIdemBoth = "idem client and server, memory store"
	// GRPCBareAgain: GRPCBare measured a second time: its ratio to GRPCBare
	// is the noise.
	GRPCBareAgain = "bare call again"
)

// GRPCCallers lists section 9's callers in the order of its table.
var GRPCCallers = []string{GRPCBare, GRPCBareKeyed, GRPCMiddleware, GRPCIdemClient, GRPCIdemBoth, GRPCBareAgain}

// GRPCCostConfig sets up section 9, measured as sections 7 and 8 are:
// rounds of one batch per caller, in a shuffled order, ratios within a
// round.
type GRPCCostConfig struct {
	// Batch is about how long one caller runs in a round (sized from the
	// bare call's speed; the same number of calls for every caller).
	Batch time.Duration
	// Rounds is how many times every caller runs one batch.
	Rounds int
}

// GRPCCostResult is section 9; its rows are those of section 8's table.
type GRPCCostResult struct {
	// Ops is the number of calls of every batch; Rounds the rounds run.
	Ops, Rounds int
	// Rows holds one row per caller, in the order of GRPCCallers; a row's
	// Front is the caller, its Ratio the caller's time ÷ the bare call's.
	Rows []GatewayCostRow
}

// Row returns the row of caller (a zero row when it was not measured).
func (r GRPCCostResult) Row(caller string) GatewayCostRow {
	i := slices.IndexFunc(r.Rows, func(row GatewayCostRow) bool { return row.Front == caller })
	if i < 0 {
		return GatewayCostRow{Front: caller}
	}
	return r.Rows[i]
}

// grpcCallTimeout is every call's deadline: gRPC callers set one, and each
// caller's interceptors see the same.
const grpcCallTimeout = 10 * time.Second

// grpcCaller is one caller set up for section 9: a connection to a server
// of its own.
type grpcCaller struct {
	name  string
	cc    *grpc.ClientConn
	keyed bool   // the caller sets a key
	fresh func() // before each batch, outside its time: a new memory store
	close func()
}

// RunGRPCCost measures every caller of GRPCCallers, each calling its own
// loopback gRPC server one call after another (the demo service's Charge,
// a method with no idempotency_level, a 19-byte request), and reports the
// times per call and their ratios to the bare call. Client and server share
// the process and its cores.
func RunGRPCCost(ctx context.Context, cfg GRPCCostConfig) (GRPCCostResult, error) {
	if cfg.Rounds <= 0 || cfg.Batch <= 0 {
		return GRPCCostResult{}, fmt.Errorf("bench: RunGRPCCost: Rounds and Batch must be set")
	}
	var callers []grpcCaller
	defer func() {
		for _, c := range callers {
			c.close()
		}
	}()
	for _, name := range GRPCCallers {
		c, err := newGRPCCaller(name)
		if err != nil {
			return GRPCCostResult{}, fmt.Errorf("bench: the gRPC cost, %s: %w", name, err)
		}
		callers = append(callers, c)
	}
	rng := rand.New(rand.NewPCG(9, 9)) // every run shuffles the rounds alike
	rounds, err := runRounds(len(callers), cfg.Batch, cfg.Rounds, rng, func(i, n int) (blockResult, error) {
		c := callers[i]
		c.fresh()
		r, err := runBlock(n, func() error { return grpcCharge(ctx, c.cc, c.keyed) })
		if err != nil {
			err = fmt.Errorf("bench: the gRPC cost, %s: %w", c.name, err)
		}
		return r, err
	})
	if err != nil {
		return GRPCCostResult{}, err
	}
	names := make([]string, len(callers))
	for i, c := range callers {
		names[i] = c.name
	}
	return GRPCCostResult{Ops: rounds[0][0].n, Rounds: cfg.Rounds, Rows: costRows(names, rounds, GRPCBareAgain)}, nil
}

// newGRPCCaller starts caller name's server on a loopback port and dials it.
func newGRPCCaller(name string) (grpcCaller, error) {
	c := grpcCaller{name: name, fresh: func() {}}
	var serverOpts []grpc.ServerOption
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	switch name {
	case GRPCBare, GRPCBareAgain:
	case GRPCBareKeyed:
		c.keyed = true
	case GRPCMiddleware:
		dialOpts = append(dialOpts, grpc.WithUnaryInterceptor(grpcretry.UnaryClientInterceptor(grpcretry.WithMax(3))))
	case GRPCIdemClient, GRPCIdemBoth:
		// One layer retries (docs/grpc.md).
		dialOpts = append(dialOpts, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
		if name == GRPCIdemBoth {
			var current atomic.Pointer[grpc.UnaryServerInterceptor]
			c.fresh = func() {
				icpt := idemgrpc.UnaryServerInterceptor(memstore.New())
				current.Store(&icpt)
			}
			c.fresh()
			serverOpts = append(serverOpts, grpc.UnaryInterceptor(func(ctx context.Context, req any,
				info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return (*current.Load())(ctx, req, info, h)
			}))
		}
	default:
		panic("bench: no gRPC caller " + name)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return c, err
	}
	srv := grpc.NewServer(serverOpts...)
	idemgrpctest.Register(srv, grpcChargeHandler)
	go func() { _ = srv.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), dialOpts...)
	if err != nil {
		srv.Stop()
		return c, err
	}
	c.cc = cc
	c.close = func() { _ = cc.Close(); srv.Stop() }
	return c, nil
}

// grpcChargeHandler answers every call with a small message.
func grpcChargeHandler(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("pay_1 " + in.GetValue()), nil
}

// grpcCharge makes one call, with a new key in its metadata when keyed,
// and checks its answer.
func grpcCharge(ctx context.Context, cc *grpc.ClientConn, keyed bool) error {
	ctx, cancel := context.WithTimeout(ctx, grpcCallTimeout)
	defer cancel()
	if keyed {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, uuid.NewString())
	}
	got, err := idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "cus_4242 1999 EUR")
	if err != nil {
		return err
	}
	if got != "pay_1 cus_4242 1999 EUR" {
		return fmt.Errorf("answer %q", got)
	}
	return nil
}
