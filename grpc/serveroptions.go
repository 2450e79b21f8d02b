package idemgrpc

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/server"
)

// A ServerOption configures UnaryServerInterceptor. An impossible setting
// panics when the option is made, with a message that names it.
type ServerOption func(*serverConfig)

// serverConfig is the server interceptor's policy, fixed when it is made.
type serverConfig struct {
	ttl, lockTTL     time.Duration
	inProgressWait   time.Duration
	maxRequestBytes  int
	maxResponseBytes int
	limits           *server.Limits // nil: the process's default Limits, shared with the HTTP middleware
	scope            func(context.Context) (string, error)
	protect          func(fullMethod string) bool // nil: methods that are not repeatable
	onOutcome        func(ServerEvent)
	now              func() time.Time
}

func newServerConfig(opts []ServerOption) *serverConfig {
	c := &serverConfig{
		ttl: server.DefaultTTL, lockTTL: server.DefaultLockTTL, inProgressWait: server.DefaultInProgressWait,
		maxRequestBytes: server.DefaultMaxBodyBytes, maxResponseBytes: server.DefaultMaxResponseBytes, now: time.Now,
	}
	for _, o := range opts {
		if o == nil {
			badArg("UnaryServerInterceptor(nil ServerOption)", "a ServerOption")
		}
		o(c)
	}
	return c
}

func badArg(call, want string) { panic("idemgrpc: " + call + ": want " + want) }

// WithTTL sets how long a recorded answer lives (default server.DefaultTTL,
// 24 h); after it the key is a new call. It panics if d <= 0.
func WithTTL(d time.Duration) ServerOption {
	if d <= 0 {
		badArg(fmt.Sprintf("WithTTL(%v)", d), "d > 0")
	}
	return func(c *serverConfig) { c.ttl = d }
}

// WithLockTTL sets how long a claim lives without renewal (default
// server.DefaultLockTTL, 30 s): how long a crashed server's claim blocks its
// key. It panics if d <= 0.
func WithLockTTL(d time.Duration) ServerOption {
	if d <= 0 {
		badArg(fmt.Sprintf("WithLockTTL(%v)", d), "d > 0")
	}
	return func(c *serverConfig) { c.lockTTL = d }
}

// WithInProgressWait sets how long a duplicate waits for the first call with
// its key before it is answered Aborted with a pushback (default
// server.DefaultInProgressWait, 5 s; 0 answers at once). It panics if d < 0.
func WithInProgressWait(d time.Duration) ServerOption {
	if d < 0 {
		badArg(fmt.Sprintf("WithInProgressWait(%v)", d), "d >= 0")
	}
	return func(c *serverConfig) { c.inProgressWait = d }
}

// WithMaxRequestBytes bounds the encoded request message of a protected call
// (default server.DefaultMaxBodyBytes, 1 MiB); a larger one is answered
// ResourceExhausted and nothing runs. It panics if n <= 0.
func WithMaxRequestBytes(n int) ServerOption {
	if n <= 0 {
		badArg(fmt.Sprintf("WithMaxRequestBytes(%d)", n), "n > 0")
	}
	return func(c *serverConfig) { c.maxRequestBytes = n }
}

// WithMaxResponseBytes bounds the recorded answer's response message
// (default server.DefaultMaxResponseBytes, 1 MiB); a handler's larger
// response cannot be recorded: the call is answered Internal and its key
// released, or, after server.DeclareEffect, answered and recorded as outcome
// unknown. It panics if n <= 0.
func WithMaxResponseBytes(n int) ServerOption {
	if n <= 0 {
		badArg(fmt.Sprintf("WithMaxResponseBytes(%d)", n), "n > 0")
	}
	return func(c *serverConfig) { c.maxResponseBytes = n }
}

// WithLimits shares l, the process's bounds, with the HTTP middleware and
// every other interceptor of the process (default: the process's default
// Limits, which the middleware built without server.WithLimits shares too):
// the bytes of the request messages held, the duplicates waiting, each call's
// time. It panics if l is nil.
func WithLimits(l *server.Limits) ServerOption {
	if l == nil {
		badArg("WithLimits(nil)", "a *server.Limits")
	}
	return func(c *serverConfig) { c.limits = l }
}

// WithScope sets the function that returns the principal a call's key
// belongs to (default: one scope for every caller); an error answers
// Unauthenticated and nothing runs. BearerScope is the one a server whose
// callers send a bearer token uses. It panics if scope is nil.
func WithScope(scope func(ctx context.Context) (string, error)) ServerOption {
	if scope == nil {
		badArg("WithScope(nil)", "a function")
	}
	return func(c *serverConfig) { c.scope = scope }
}

// BearerScope is server.BearerScope over gRPC: the scope of the caller's
// authorization metadata ("Bearer <token>"), the same scope as over HTTP for
// the same token, so a principal's keys are its own whichever protocol it
// calls with. No authorization metadata is server.ErrNoCredentials; one that
// is not a bearer token, server.ErrBadCredentials.
func BearerScope(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r := &http.Request{Header: http.Header{}}
	for _, v := range md.Get("authorization") {
		r.Header.Add("Authorization", v)
	}
	return server.BearerScope(r)
}

// WithProtectedMethods sets which unary methods need a key, by full method
// name ("/pkg.Service/Method"). The default protects every method whose
// registered descriptor does not say idempotency_level IDEMPOTENT or
// NO_SIDE_EFFECTS (and every method without a descriptor); the others pass
// through untouched, keyed or not. It panics if protect is nil.
func WithProtectedMethods(protect func(fullMethod string) bool) ServerOption {
	if protect == nil {
		badArg("WithProtectedMethods(nil)", "a function")
	}
	return func(c *serverConfig) { c.protect = protect }
}

// WithOnOutcome sets a function called once per protected call, after its
// answer is decided, with how it was answered. It runs on the call's
// goroutine and must not block for long. It panics if f is nil.
func WithOnOutcome(f func(ServerEvent)) ServerOption {
	if f == nil {
		badArg("WithOnOutcome(nil)", "a function")
	}
	return func(c *serverConfig) { c.onOutcome = f }
}

// ServerEvent is how the server interceptor answered one protected call.
type ServerEvent struct {
	Method  string         // the full method name
	Key     string         // the parsed key, "" when it was missing or invalid
	Outcome server.Outcome // what the store reported; 0 when it was not asked, or failed
	// Code is the status code answered (codes.OK for a success), and Reason
	// the ErrorInfo reason of an answer of the interceptor's own.
	Code   uint32
	Reason string
	// Stored: the handler's answer was recorded (first executions only).
	Stored bool
	// Err is the error behind an answer of the interceptor's own (the
	// store's, the scope's, a key's).
	Err             error
	HandlerDuration time.Duration // how long the handler ran, 0 when it did not
	Waited          time.Duration // how long the store waited for another call with the key
}
