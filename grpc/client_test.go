package idemgrpc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	idemgrpc "github.com/idemkit/idem/grpc"
	"github.com/idemkit/idem/grpc/idemgrpctest"
)

// reports collects the Reports of WithOnDone and the AttemptInfos of
// WithOnRetry.
type reports struct {
	mu      sync.Mutex
	done    []idem.Report
	retries []idem.AttemptInfo
}

func (r *reports) options() []idem.Option {
	return []idem.Option{
		idem.WithOnDone(func(_ context.Context, rep idem.Report) { r.mu.Lock(); r.done = append(r.done, rep); r.mu.Unlock() }),
		idem.WithOnRetry(func(_ context.Context, a idem.AttemptInfo) {
			r.mu.Lock()
			r.retries = append(r.retries, a)
			r.mu.Unlock()
		}),
	}
}

func (r *reports) last(t *testing.T) idem.Report {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.done)
	return r.done[len(r.done)-1]
}

// failing returns a handler that answers err (with trailer md) to its first
// n calls, then succeeds.
func failing(n int, err error, md metadata.MD) idemgrpctest.Handler {
	var mu sync.Mutex
	calls := 0
	return func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		mu.Lock()
		calls++
		c := calls
		mu.Unlock()
		if c <= n {
			if md != nil {
				_ = grpc.SetTrailer(ctx, md)
			}
			return nil, err
		}
		return wrapperspb.String("ok " + in.GetValue()), nil
	}
}

var unavailable = status.Error(codes.Unavailable, "down for a moment")

func fast() []idem.Option {
	return []idem.Option{idem.WithBackoff(time.Millisecond, 5*time.Millisecond)}
}

// A key generated once per call, sent by every attempt: the server sees one
// key for the call's two attempts.
func TestClientOneKeyPerCall(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	var mu sync.Mutex
	var keys []string
	s.setHandler(func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, md.Get(idemgrpc.MetadataKey)...)
		if len(keys) == 1 {
			return nil, unavailable
		}
		return in, nil
	})
	var r reports
	cc := s.dial(t, append(fast(), r.options()...)...)
	out, err := idemgrpctest.Call(t.Context(), cc, idemgrpctest.Charge, "a")
	require.NoError(t, err)
	assert.Equal(t, "a", out)
	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1])
	rep := r.last(t)
	assert.Equal(t, keys[0], rep.Key)
	assert.Equal(t, 2, rep.Attempts)
	assert.Equal(t, "success", rep.Stop)
	assert.Equal(t, idemgrpctest.Charge, rep.Method)

	// The caller's key, from the metadata or from idem.ContextWithKey, is
	// the one sent.
	keys = nil
	s.setHandler(func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		keys = append(keys, md.Get(idemgrpc.MetadataKey)...)
		mu.Unlock()
		return in, nil
	})
	_, err = idemgrpctest.Call(metadata.AppendToOutgoingContext(t.Context(), idemgrpc.MetadataKey, "mine-1"), cc, idemgrpctest.Charge, "a")
	require.NoError(t, err)
	_, err = idemgrpctest.Call(idem.ContextWithKey(t.Context(), idem.KeyFor("orders", "42")), cc, idemgrpctest.Get, "a")
	require.NoError(t, err)
	assert.Equal(t, []string{"mine-1", idem.KeyFor("orders", "42")}, keys)
}

// An invalid key fails the call before anything is sent, as over HTTP.
func TestClientInvalidKey(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	cc := s.dial(t)
	_, err := idemgrpctest.Call(idem.ContextWithKey(t.Context(), "has space"), cc, idemgrpctest.Charge, "a")
	require.ErrorIs(t, err, idem.ErrInvalidKey)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, err.Error(), "from the context")
	ctx := metadata.AppendToOutgoingContext(t.Context(), idemgrpc.MetadataKey, "a", idemgrpc.MetadataKey, "b")
	_, err = idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "a")
	require.ErrorIs(t, err, idem.ErrInvalidKey)
	assert.Zero(t, s.execs.Load())
}

// What is retried and what is not, by code and by method.
func TestClientRetryTable(t *testing.T) {
	t.Parallel()
	info := func(reason string) error {
		st, err := status.New(codes.Aborted, "busy").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: idemgrpc.ErrorDomain})
		require.NoError(t, err)
		return st.Err()
	}
	cases := []struct {
		name     string
		method   string
		noKeys   bool // WithAutoKeys(false)
		ownKey   bool // the caller's key (idem.ContextWithKey): not fresh
		err      error
		attempts int
	}{
		{"Unavailable, keyed", idemgrpctest.Charge, false, false, unavailable, 2},
		{"Internal, keyed", idemgrpctest.Charge, false, false, status.Error(codes.Internal, "x"), 2},
		{"DeadlineExceeded from the server", idemgrpctest.Charge, false, false, status.Error(codes.DeadlineExceeded, "x"), 2},
		{"Aborted in progress, the caller's key", idemgrpctest.Charge, false, true, info(idemgrpc.ReasonInProgress), 2},
		{"Aborted in progress, a fresh key", idemgrpctest.Charge, false, false, info(idemgrpc.ReasonInProgress), 1},
		{"Aborted of another kind", idemgrpctest.Charge, false, false, info("OTHER"), 1},
		{"Unknown, outcome unknown", idemgrpctest.Charge, false, false,
			status.ErrorProto(mustProto(t, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)), 1},
		{"ResourceExhausted without pushback", idemgrpctest.Charge, false, false, status.Error(codes.ResourceExhausted, "x"), 1},
		{"InvalidArgument", idemgrpctest.Charge, false, false, status.Error(codes.InvalidArgument, "x"), 1},
		{"FailedPrecondition", idemgrpctest.Charge, false, false, status.Error(codes.FailedPrecondition, "x"), 1},
		{"PermissionDenied", idemgrpctest.Charge, false, false, status.Error(codes.PermissionDenied, "x"), 1},
		{"Unauthenticated", idemgrpctest.Charge, false, false, status.Error(codes.Unauthenticated, "x"), 1},
		{"NotFound", idemgrpctest.Charge, false, false, status.Error(codes.NotFound, "x"), 1},
		{"Unimplemented", idemgrpctest.Charge, false, false, status.Error(codes.Unimplemented, "x"), 1},
		{"Unavailable, unkeyed, no idempotency_level", idemgrpctest.Charge, true, false, unavailable, 1},
		{"Unavailable, unkeyed, NO_SIDE_EFFECTS", idemgrpctest.Get, true, false, unavailable, 2},
		{"Unavailable, unkeyed, IDEMPOTENT", idemgrpctest.Put, true, false, unavailable, 2},
		{"Unavailable, unkeyed, not registered", "/idem.demo.v1.Unknown/Do", true, false, unavailable, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, nil)
			s.setHandler(failing(1, c.err, nil))
			var r reports
			cc := s.dial(t, append(append(fast(), idem.WithAutoKeys(!c.noKeys)), r.options()...)...)
			ctx := t.Context()
			if c.ownKey {
				ctx = idem.ContextWithKey(ctx, "caller-key")
			}
			_, err := idemgrpctest.Call(ctx, cc, c.method, "a")
			if c.method == "/idem.demo.v1.Unknown/Do" {
				assert.Equal(t, codes.Unimplemented, status.Code(err)) // the service has no such method
				assert.Equal(t, 1, r.last(t).Attempts)
				return
			}
			assert.Equal(t, c.attempts, r.last(t).Attempts)
			if c.attempts == 1 {
				require.Error(t, err)
				assert.Equal(t, status.Code(c.err), status.Code(err), "the answer, as grpc-go returned it")
				var e *idemgrpc.Error
				assert.False(t, errors.As(err, &e), "an answer is no *Error")
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func mustProto(t *testing.T, code codes.Code, reason string) *spbStatus {
	st, err := status.New(code, "x").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: idemgrpc.ErrorDomain})
	require.NoError(t, err)
	return st.Proto()
}

// gRFC A6's pushback sets the wait; RetryInfo does when there is none; both
// are capped by WithMaxRetryAfter, and a negative pushback means no retry.
func TestClientPushback(t *testing.T) {
	t.Parallel()
	retryInfo := func(d time.Duration) error {
		st, err := status.New(codes.Unavailable, "later").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		require.NoError(t, err)
		return st.Err()
	}
	cases := []struct {
		name     string
		err      error
		md       metadata.MD
		attempts int
		wait     time.Duration
		stop     string
	}{
		{"pushback", unavailable, metadata.Pairs("grpc-retry-pushback-ms", "150"), 2, 150 * time.Millisecond, "success"},
		{"RetryInfo", retryInfo(120 * time.Millisecond), nil, 2, 120 * time.Millisecond, "success"},
		{"pushback wins over RetryInfo", retryInfo(time.Hour), metadata.Pairs("grpc-retry-pushback-ms", "100"), 2,
			100 * time.Millisecond, "success"},
		{"pushback past WithMaxRetryAfter", unavailable, metadata.Pairs("grpc-retry-pushback-ms", "3600000"), 1, 0, "exhausted"},
		{"RetryInfo past WithMaxRetryAfter", retryInfo(time.Hour), nil, 1, 0, "exhausted"},
		{"negative pushback", unavailable, metadata.Pairs("grpc-retry-pushback-ms", "-1"), 1, 0, "final-status"},
		{"malformed pushback", unavailable, metadata.Pairs("grpc-retry-pushback-ms", "soon"), 1, 0, "final-status"},
		{"ResourceExhausted with pushback", status.Error(codes.ResourceExhausted, "quota"),
			metadata.Pairs("grpc-retry-pushback-ms", "50"), 2, 50 * time.Millisecond, "success"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, nil)
			s.setHandler(failing(1, c.err, c.md))
			var r reports
			cc := s.dial(t, append(append(fast(), idem.WithMaxRetryAfter(time.Second)), r.options()...)...)
			_, err := idemgrpctest.Call(t.Context(), cc, idemgrpctest.Charge, "a")
			rep := r.last(t)
			assert.Equal(t, c.attempts, rep.Attempts)
			assert.Equal(t, c.stop, rep.Stop)
			if c.attempts == 1 {
				assert.Equal(t, status.Code(c.err), status.Code(err))
				return
			}
			require.NoError(t, err)
			require.Len(t, r.retries, 1)
			assert.Equal(t, c.wait, r.retries[0].RetryAfter)
			assert.GreaterOrEqual(t, r.retries[0].Wait, c.wait, "the wait is at least the pushback")
		})
	}
}

// The caller's deadline bounds the retries: once the next wait would end
// past it, the call ends on its latest answer (as grpc-go's own retries do),
// and the Report says the deadline stopped it.
func TestClientCallersDeadline(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	s.setHandler(failing(1<<30, unavailable, metadata.Pairs("grpc-retry-pushback-ms", "50")))
	var r reports
	cc := s.dial(t, append(r.options(), idem.WithMaxAttempts(1000), idem.WithRetryBudget(nil))...)
	ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
	defer cancel()
	_, err := idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "a")
	require.Error(t, err)
	assert.Contains(t, []codes.Code{codes.Unavailable, codes.DeadlineExceeded}, status.Code(err), "%v", err)
	rep := r.last(t)
	assert.Equal(t, "deadline", rep.Stop)
	assert.GreaterOrEqual(t, rep.Attempts, 2)
	assert.Less(t, rep.Elapsed, 400*time.Millisecond+time.Second)
}

// An operation that ends without an answer to return (the caller cancelled)
// is an *Error with the context's code.
func TestClientCanceled(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	s.setHandler(func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		cancel()
		return nil, unavailable
	})
	cc := s.dial(t, idem.WithBackoff(time.Second, time.Second))
	_, err := idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "a")
	require.Error(t, err)
	assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	var e *idemgrpc.Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotEmpty(t, e.Key)
}

// WithMaxElapsed caps the call; WithAttemptTimeout cuts an attempt that
// hangs, and the retry gets the answer.
func TestClientAttemptTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	s.setHandler(func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			select { // hangs until the client gives up on this attempt
			case <-ctx.Done():
			case <-release:
			}
			return nil, ctx.Err()
		}
		return in, nil
	})
	defer close(release)
	var r reports
	cc := s.dial(t, append(append(fast(), idem.WithAttemptTimeout(100*time.Millisecond)), r.options()...)...)
	out, err := idemgrpctest.Call(t.Context(), cc, idemgrpctest.Charge, "a")
	require.NoError(t, err)
	assert.Equal(t, "a", out)
	require.Len(t, r.retries, 1)
	assert.Equal(t, "attempt-timeout", r.retries[0].Reason)
}

// A shared Budget that pays for no retry ends the call on its first answer.
func TestClientSharedBudget(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	s.setHandler(failing(1, unavailable, nil))
	var r reports
	cc := s.dial(t, append(append(fast(), idem.WithRetryBudget(idem.NewBudget(0, 0))), r.options()...)...)
	_, err := idemgrpctest.Call(t.Context(), cc, idemgrpctest.Charge, "a")
	assert.Equal(t, codes.Unavailable, status.Code(err))
	rep := r.last(t)
	assert.True(t, rep.BudgetRefused)
	assert.Equal(t, "budget", rep.Stop)
	assert.Equal(t, 1, rep.Attempts)
}

// Each attempt's context carries its AttemptInfo, for the interceptors below.
func TestClientAttemptFromContext(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	s.setHandler(failing(1, unavailable, nil))
	var seen []idem.AttemptInfo
	below := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		a, ok := idem.AttemptFromContext(ctx)
		require.True(t, ok)
		seen = append(seen, a)
		return inv(ctx, method, req, reply, cc, opts...)
	}
	cc := s.dial(t, fast()...)
	_ = cc.Close()
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecureCreds()), grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor(fast()...), below))
	require.NoError(t, err)
	defer cc.Close()
	_, err = idemgrpctest.Call(t.Context(), cc, idemgrpctest.Charge, "a")
	require.NoError(t, err)
	require.Len(t, seen, 2)
	assert.Equal(t, 1, seen[0].Number)
	assert.Equal(t, 2, seen[1].Number)
	assert.Equal(t, "status", seen[1].Reason)
	assert.Equal(t, seen[0].Key, seen[1].Key)
	assert.Equal(t, int(codes.Unavailable), seen[1].Status)
}
