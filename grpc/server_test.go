package idemgrpc_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// rawClient is a client without idem's interceptor: each call is sent once,
// with the metadata the test gives.
func (s *testServer) rawClient(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.addr, append(s.bufDialer(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry())...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key)
}

// reasonOf returns the ErrorInfo reason of err's status.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// The server side of the contract, call by call (docs/CONTRACT.md, "Over gRPC" in §3).
func TestServerContract(t *testing.T) {
	t.Parallel()
	s := startServer(t, memstore.New(), idemgrpc.WithInProgressWait(0))
	cc := s.rawClient(t)
	ctx := t.Context()

	// No key, or an invalid one: InvalidArgument, nothing runs.
	_, err := idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "a")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, idemgrpc.ReasonMissingKey, reasonOf(err))
	_, err = idemgrpctest.Call(withKey(ctx, "two words"), cc, idemgrpctest.Charge, "a")
	assert.Equal(t, idemgrpc.ReasonInvalidKey, reasonOf(err))
	_, err = idemgrpctest.Call(withKey(withKey(ctx, "k"), "k2"), cc, idemgrpctest.Charge, "a")
	assert.Equal(t, idemgrpc.ReasonInvalidKey, reasonOf(err))
	assert.Zero(t, s.execs.Load())

	// Methods whose descriptor says they may be repeated are not protected.
	_, err = idemgrpctest.Call(ctx, cc, idemgrpctest.Get, "a")
	require.NoError(t, err)
	assert.EqualValues(t, 1, s.execs.Load())

	// The first call runs; its retry is its replay, marked in the trailer.
	var trailer metadata.MD
	out, err := idemgrpctest.Call(withKey(ctx, "k1"), cc, idemgrpctest.Charge, "a", grpc.Trailer(&trailer))
	require.NoError(t, err)
	assert.Equal(t, "charged a", out)
	assert.False(t, idemgrpc.Replayed(trailer))
	out, err = idemgrpctest.Call(withKey(ctx, "k1"), cc, idemgrpctest.Charge, "a", grpc.Trailer(&trailer))
	require.NoError(t, err)
	assert.Equal(t, "charged a", out)
	assert.True(t, idemgrpc.Replayed(trailer))
	assert.EqualValues(t, 2, s.execs.Load())

	// The key with another request: FailedPrecondition.
	_, err = idemgrpctest.Call(withKey(ctx, "k1"), cc, idemgrpctest.Charge, "b")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Equal(t, idemgrpc.ReasonKeyReused, reasonOf(err))
	assert.EqualValues(t, 2, s.execs.Load())
}

// A duplicate of a call still running is told to come back: Aborted with a
// pushback, in the trailer and as a RetryInfo.
func TestServerInProgress(t *testing.T) {
	t.Parallel()
	s := startServer(t, memstore.New(), idemgrpc.WithInProgressWait(0))
	started, release := make(chan struct{}), make(chan struct{})
	s.setHandler(func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(started)
		<-release
		return in, nil
	})
	cc := s.rawClient(t)
	done := make(chan error, 1)
	go func() {
		_, err := idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, "a")
		done <- err
	}()
	<-started
	var trailer metadata.MD
	_, err := idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, "a", grpc.Trailer(&trailer))
	assert.Equal(t, codes.Aborted, status.Code(err))
	assert.Equal(t, idemgrpc.ReasonInProgress, reasonOf(err))
	ms, perr := strconv.Atoi(trailer.Get("grpc-retry-pushback-ms")[0])
	require.NoError(t, perr)
	assert.GreaterOrEqual(t, ms, 1000)
	close(release)
	require.NoError(t, <-done)
	assert.EqualValues(t, 1, s.execs.Load())
}

// The recorded answer is the whole answer: an error status with its
// details, header and trailer metadata, replayed as they were.
func TestServerReplaysTheWholeAnswer(t *testing.T) {
	t.Parallel()
	s := startServer(t, memstore.New())
	s.setHandler(func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", "ch_1", "x-multi", "1", "x-multi", "2"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "L9"))
		st, _ := status.New(codes.NotFound, "no such account").WithDetails(&errdetails.ResourceInfo{ResourceName: "acct/9"})
		return nil, st.Err()
	})
	cc := s.rawClient(t)
	call := func() (metadata.MD, metadata.MD, error) {
		var h, tr metadata.MD
		_, err := idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, "a", grpc.Header(&h), grpc.Trailer(&tr))
		return h, tr, err
	}
	h1, t1, err1 := call()
	h2, t2, err2 := call()
	assert.EqualValues(t, 1, s.execs.Load(), "NotFound is an outcome: recorded")
	assert.Equal(t, status.Convert(err1).Proto().String(), status.Convert(err2).Proto().String())
	assert.Equal(t, h1.Get("x-charge-id"), h2.Get("x-charge-id"))
	assert.Equal(t, []string{"1", "2"}, h2.Get("x-multi"))
	assert.Equal(t, t1.Get("x-ledger"), t2.Get("x-ledger"))
	assert.True(t, idemgrpc.Replayed(t2))
}

// Failures and refusals release the key, unless the handler declared its
// effect: then the failure is the outcome, replayed.
func TestServerWhatIsRecorded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err      error
		declare  bool
		recorded bool
	}{
		{status.Error(codes.Unavailable, "x"), false, false},
		{status.Error(codes.Internal, "x"), false, false},
		{status.Error(codes.InvalidArgument, "x"), false, false},
		{status.Error(codes.FailedPrecondition, "x"), false, false},
		{status.Error(codes.ResourceExhausted, "x"), false, false},
		{status.Error(codes.Canceled, "x"), false, false},
		{status.Error(codes.AlreadyExists, "x"), false, true},
		{status.Error(codes.Internal, "x"), true, true},
		{nil, false, true},
	} {
		t.Run(status.Code(c.err).String()+map[bool]string{true: "+effect"}[c.declare], func(t *testing.T) {
			t.Parallel()
			s := startServer(t, memstore.New())
			s.setHandler(func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				if c.declare {
					require.True(t, server.DeclareEffect(ctx))
				}
				if c.err != nil {
					return nil, c.err
				}
				return in, nil
			})
			cc := s.rawClient(t)
			for range 2 {
				_, err := idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, "a")
				assert.Equal(t, status.Code(c.err), status.Code(err))
			}
			want := int64(2)
			if c.recorded {
				want = 1
			}
			assert.Equal(t, want, s.execs.Load())
		})
	}
}

// A caller's key is its own: the same key from another bearer token is
// another call.
func TestServerScope(t *testing.T) {
	t.Parallel()
	s := startServer(t, memstore.New(), idemgrpc.WithScope(idemgrpc.BearerScope))
	cc := s.rawClient(t)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(withKey(t.Context(), "k"), "authorization", "Bearer "+token)
	}
	for _, tok := range []string{"alice", "bob", "alice"} {
		_, err := idemgrpctest.Call(as(tok), cc, idemgrpctest.Charge, "a")
		require.NoError(t, err)
	}
	assert.EqualValues(t, 2, s.execs.Load())
	_, err := idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, "a")
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
}

// The process's Limits bound what protected calls hold: a request message
// past the buffer's room is answered Unavailable with a pushback.
func TestServerLimits(t *testing.T) {
	t.Parallel()
	l := server.NewLimits(server.LimitBuffered(64))
	s := startServer(t, memstore.New(), idemgrpc.WithLimits(l), idemgrpc.WithMaxRequestBytes(1000))
	cc := s.rawClient(t)
	var trailer metadata.MD
	_, err := idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, string(make([]byte, 100)), grpc.Trailer(&trailer))
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, idemgrpc.ReasonBusy, reasonOf(err))
	assert.Equal(t, []string{"1000"}, trailer.Get("grpc-retry-pushback-ms"))
	_, err = idemgrpctest.Call(withKey(t.Context(), "k"), cc, idemgrpctest.Charge, string(make([]byte, 2000)))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, idemgrpc.ReasonRequestTooLarge, reasonOf(err))
	assert.Zero(t, s.execs.Load())
	assert.Zero(t, l.Buffered(), "what a call held is given back")
}

// Over both transports, the client and the server together: an answer lost
// after the handler ran (the connection cut as the server wrote it) is
// retried, and the retry gets the recorded answer: one execution.
func TestLostAnswerIsReplayed(t *testing.T) {
	t.Parallel()
	for name, start := range map[string]func(testing.TB, server.Store, ...idemgrpc.ServerOption) *testServer{
		"tcp": startServer, "bufconn": startBufServer,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t, memstore.New())
			var once sync.Once
			s.outer = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				resp, err := h(ctx, req)
				once.Do(s.lis.Lose) // the first answer, recorded, is lost on its way
				return resp, err
			}
			var r reports
			cc := s.dial(t, append(fast(), r.options()...)...)
			var trailer metadata.MD
			out, err := idemgrpctest.Call(t.Context(), cc, idemgrpctest.Charge, "a", grpc.Trailer(&trailer))
			require.NoError(t, err)
			assert.Equal(t, "charged a", out)
			assert.EqualValues(t, 1, s.execs.Load())
			assert.True(t, idemgrpc.Replayed(trailer))
			assert.Equal(t, 2, r.last(t).Attempts)
			require.Len(t, r.retries, 1)
			assert.Equal(t, int(codes.Unavailable), r.retries[0].Status)
		})
	}
}

// Concurrent duplicates of one call run it once: the others wait for its
// answer and get it replayed.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	l := server.NewLimits()
	s := startServer(t, memstore.New(), idemgrpc.WithLimits(l))
	release := make(chan struct{})
	s.setHandler(func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-release
		return wrapperspb.String("charged " + in.GetValue()), nil
	})
	cc := s.dial(t, fast()...)
	const n = 8
	ctx := idem.ContextWithKey(t.Context(), "order-1")
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	replays := make([]bool, n)
	for i := range n {
		wg.Go(func() {
			var tr metadata.MD
			outs[i], errs[i] = idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "a", grpc.Trailer(&tr))
			replays[i] = idemgrpc.Replayed(tr)
		})
	}
	for l.Waiting() < n-1 { // every duplicate waits in the store for the first
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	assert.EqualValues(t, 1, s.execs.Load())
	nreplays := 0
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, "charged a", outs[i])
		if replays[i] {
			nreplays++
		}
	}
	assert.Equal(t, n-1, nreplays)
}

// A handler that panics releases its key (the panic goes on, as grpc-go
// lets it); a retry runs the handler again.
func TestServerPanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	icpt := idemgrpc.UnaryServerInterceptor(store)
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idemgrpc.MetadataKey, "k"))
	info := &grpc.UnaryServerInfo{FullMethod: idemgrpctest.Charge}
	func() {
		defer func() { assert.Equal(t, "boom", recover()) }()
		_, _ = icpt(ctx, wrapperspb.String("a"), info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	resp, err := icpt(ctx, wrapperspb.String("a"), info, func(_ context.Context, req any) (any, error) { return req, nil })
	require.NoError(t, err)
	assert.Equal(t, "a", resp.(*wrapperspb.StringValue).GetValue())
}
