package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem/internal/keyformat"
	"github.com/idemkit/idem/internal/serverlink"
	"github.com/idemkit/idem/server"
)

// UnaryServerInterceptor returns the server side of idem for unary calls: a
// protected call (see WithProtectedMethods) needs one idempotency key
// (metadata MetadataKey), and store runs its handler once per key, records
// its answer (status, details, response message, header and trailer
// metadata) and replays it to every retry, marked by the trailer
// MetadataReplayed. What each call gets is the HTTP contract mapped onto
// status codes (docs/CONTRACT.md, "Over gRPC" in §3):
//
//	no key, an invalid key               InvalidArgument (IDEMPOTENCY_KEY_MISSING, _INVALID)
//	the key used for another request     FailedPrecondition (IDEMPOTENCY_KEY_REUSED)
//	the key's first call still running   Aborted (IDEMPOTENCY_KEY_IN_PROGRESS), with a pushback
//	the first call's answer was lost     Unknown (IDEMPOTENCY_OUTCOME_UNKNOWN), never retried
//	the store failed before the handler  Unavailable (IDEMPOTENCY_STORE_UNAVAILABLE), with a pushback
//
// The request's fingerprint is the method and the request message, encoded
// deterministically (its unknown fields included). An answer is recorded as
// an HTTP answer of its code's status would be: OK and the codes of an
// outcome (NotFound, AlreadyExists, Aborted) are; the failures (Unavailable,
// Internal, Unknown, DeadlineExceeded, ...), Canceled and the refusals
// (InvalidArgument, FailedPrecondition, PermissionDenied, Unauthenticated,
// ResourceExhausted, OutOfRange) release the key, unless the handler called
// server.DeclareEffect or server.BeginEffect, as over HTTP. A replay needs
// the method's descriptor registered (generated code registers it), to build
// its response message.
//
// The process's server.Limits are honoured (WithLimits). Streaming calls
// are not seen, so not protected. It panics if store is nil or an option is.
func UnaryServerInterceptor(store server.Store, opts ...ServerOption) grpc.UnaryServerInterceptor {
	if store == nil {
		badArg("UnaryServerInterceptor(nil)", "a server.Store")
	}
	g := &guard{store: store, cfg: newServerConfig(opts)}
	g.addDuration, g.p90 = serverlink.NewDurations()
	return g.intercept
}

// guard is the interceptor's immutable state, and its handlers' recent
// durations (for the pushback of an in-progress answer).
type guard struct {
	store       server.Store
	cfg         *serverConfig
	methods     methods
	addDuration func(time.Duration)
	p90         func() (time.Duration, bool)
}

func (g *guard) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m := g.methods.lookup(info.FullMethod)
	if protect := g.cfg.protect; protect != nil && !protect(info.FullMethod) || protect == nil && m.repeatable {
		return handler(ctx, req)
	}
	ex := &exchange{g: g, ctx: ctx, method: info.FullMethod, output: m, req: req, handler: handler}
	return ex.serve(ctx)
}

// exchange is the state of one protected call.
type exchange struct {
	g       *guard
	ctx     context.Context // the call's, whose stream takes the trailer
	method  string
	output  method
	req     any
	handler grpc.UnaryHandler
	ev      ServerEvent

	start    time.Time
	ran      bool // the store called run
	panicked bool
	panicVal any
	unknown  bool // the handler's effect happened, and its answer could not be recorded
	resp     any  // the handler's
	err      error
	stored   bool
}

func (ex *exchange) serve(ctx context.Context) (any, error) {
	cfg := ex.g.cfg
	ex.ev.Method = ex.method
	key, err := incomingKey(ctx)
	if err != nil {
		why := ReasonInvalidKey
		if errors.Is(err, errMissingKey) {
			why = ReasonMissingKey
		}
		return ex.refuse(codes.InvalidArgument, why, err.Error(), 0, err)
	}
	ex.ev.Key = key
	var scope string
	if cfg.scope != nil {
		if scope, err = cfg.scope(ctx); err != nil {
			return ex.refuse(codes.Unauthenticated, ReasonUnauthenticated, "the call's principal could not be established", 0, err)
		}
	}
	if d := serverlink.RequestTimeout(cfg.limits); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	body, err := ex.requestBytes()
	if err != nil {
		return nil, ex.emitErr(err)
	}
	if !serverlink.Reserve(cfg.limits, int64(len(body))) {
		return ex.refuse(codes.Unavailable, ReasonBusy, "the server holds as many requests as it can; retry", time.Second, nil)
	}
	defer serverlink.Unreserve(cfg.limits, int64(len(body)))

	pctx, effect := serverlink.Protect(ctx, cfg.limits)
	sreq := server.Request{Scope: scope, Key: key, Fingerprint: fingerprint(ex.method, body), TTL: cfg.ttl,
		LockTTL: cfg.lockTTL, Wait: cfg.inProgressWait}
	ex.start = cfg.now()
	res, err := ex.g.store.Do(pctx, sreq, func(ctx context.Context) (*server.Response, bool) { return ex.run(ctx, effect) })
	return ex.finish(ctx, res, err)
}

// errMissingKey is a protected call without a key.
var errMissingKey = errors.New("idem: a protected call needs an " + MetadataKey + " metadata value")

// incomingKey returns the call's key: its one MetadataKey value, checked.
func incomingKey(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	switch vs := md.Get(MetadataKey); len(vs) {
	case 0:
		return "", errMissingKey
	case 1:
		if err := keyformat.Check(vs[0], keyformat.MaxLen); err != nil {
			return "", fmt.Errorf("idem: invalid %s: %v", MetadataKey, err)
		}
		return vs[0], nil
	default:
		return "", fmt.Errorf("idem: %d %s values (one is allowed)", len(vs), MetadataKey)
	}
}

// requestBytes returns the request message's deterministic encoding, what
// the fingerprint hashes; an answer of the interceptor's own when it has
// none or it is too large.
func (ex *exchange) requestBytes() ([]byte, error) {
	msg, ok := ex.req.(proto.Message)
	if !ok {
		return nil, ex.status(codes.Internal, ReasonUnprotectable,
			fmt.Sprintf("the request of %s is a %T, not a protocol buffer message: it cannot be fingerprinted", ex.method, ex.req), 0)
	}
	if n := proto.Size(msg); n > ex.g.cfg.maxRequestBytes {
		return nil, ex.status(codes.ResourceExhausted, ReasonRequestTooLarge,
			fmt.Sprintf("the request message is %d bytes; a protected call's is at most %d", n, ex.g.cfg.maxRequestBytes), 0)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, ex.status(codes.Internal, ReasonUnprotectable, "the request message cannot be encoded: "+err.Error(), 0)
	}
	return b, nil
}

// fingerprint is the hex SHA-256 of the method and the request's bytes, in
// a domain of gRPC's own ('g'), so that no HTTP request has a gRPC call's.
func fingerprint(method string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0, 'g'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// run is the RunFunc the store calls: the handler, once, with its answer
// captured.
func (ex *exchange) run(ctx context.Context, effect func() bool) (resp *server.Response, keep bool) {
	if ex.ran {
		panic("idemgrpc: the Store called RunFunc twice")
	}
	ex.ran = true
	cs := &captureStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	ctx = grpc.NewContextWithServerTransportStream(ctx, cs)
	defer func() {
		if v := recover(); v != nil {
			ex.panicked, ex.panicVal = true, v
			resp, keep = ex.failed(effect())
		}
	}()
	start := ex.g.cfg.now()
	ex.resp, ex.err = ex.handler(ctx, ex.req)
	ex.ev.HandlerDuration = ex.g.cfg.now().Sub(start)
	ex.g.addDuration(ex.ev.HandlerDuration)

	st := status.Convert(ex.err)
	keep = st.Code() != codes.Canceled && serverlink.Recorded(httpStatus(st.Code())) || effect()
	a := &answer{status: st.Proto(), header: cs.header, trailer: cs.trailer}
	if st.Code() == codes.OK {
		msg, ok := ex.resp.(proto.Message)
		if !ok {
			return ex.failed(effect())
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil || len(b) > ex.g.cfg.maxResponseBytes {
			return ex.failed(effect())
		}
		a.message = b
	}
	if resp, err := a.response(); err == nil {
		ex.stored = keep
		return resp, keep
	}
	return ex.failed(effect())
}

// failed is run's result when the handler's answer cannot be recorded (a
// panic, a response too large or not encodable): Internal, not kept, so the
// key is released; or, after a declared effect, the outcome-unknown answer,
// kept, so that no retry runs the effect again.
func (ex *exchange) failed(effect bool) (*server.Response, bool) {
	if !effect {
		ex.err = ex.status(codes.Internal, ReasonUnprotectable, "the handler's answer could not be recorded", 0)
		ex.resp = nil
		return &server.Response{Status: httpStatus(codes.Internal)}, false
	}
	ex.unknown, ex.stored = true, true
	resp, _ := (&answer{status: outcomeUnknown().Proto()}).response()
	return resp, true
}

// outcomeUnknown is the answer when the handler ran and its answer could
// not be recorded: Unknown, which never invites a retry (the client reads
// the reason), as over HTTP's 500 outcome-unknown problem.
func outcomeUnknown() *status.Status {
	return withDetails(codes.Unknown, "idem: the call was processed but its answer could not be recorded; "+
		"it may have taken effect, and this key will get this same answer until an operator resolves it",
		ReasonOutcomeUnknown, 0)
}

// finish answers the call from the store's result.
func (ex *exchange) finish(ctx context.Context, res server.Result, err error) (any, error) {
	ex.ev.Outcome, ex.ev.Waited = res.Outcome, res.Waited
	if ex.panicked {
		ex.ev.Err = err
		ex.emit(codes.Unknown, "")
		panic(ex.panicVal)
	}
	if err == nil && ex.ran != (res.Outcome == server.OutcomeExecuted) {
		err = fmt.Errorf("idem: the store broke the Store contract: outcome %v after the handler ran=%v", res.Outcome, ex.ran)
	}
	switch {
	case err != nil && !ex.ran:
		ex.ev.Outcome = 0
		return ex.refuse(codes.Unavailable, ReasonStoreUnavailable,
			"the idempotency store is unavailable; the call was not processed: retry with the same key", time.Second, err)
	case err != nil:
		ex.ev.Outcome = server.OutcomeUnknown
		return nil, ex.emitErr(outcomeUnknown().Err(), err)
	}
	switch res.Outcome {
	case server.OutcomeExecuted:
		if ex.unknown {
			return nil, ex.emitErr(outcomeUnknown().Err())
		}
		ex.ev.Stored = ex.stored
		ex.emit(status.Code(ex.err), "")
		return ex.resp, ex.err
	case server.OutcomeReplayed:
		return ex.replay(ctx, res.Response)
	case server.OutcomeMismatch:
		return ex.refuse(codes.FailedPrecondition, ReasonKeyReused, "this idempotency key was used for a different request", 0, nil)
	case server.OutcomeInProgress:
		p90, known := ex.g.p90()
		after := serverlink.InProgressRetryAfter(p90, known, ex.g.cfg.now().Sub(ex.start), res.RetryAfter)
		return ex.refuse(codes.Aborted, ReasonInProgress, "a call with this idempotency key is still being processed", after, nil)
	case server.OutcomeUnknown:
		return nil, ex.emitErr(outcomeUnknown().Err())
	}
	return ex.refuse(codes.Unavailable, ReasonStoreUnavailable, "the idempotency store gave an unknown outcome", time.Second,
		fmt.Errorf("idem: the store broke the Store contract: unknown outcome %d", int(res.Outcome)))
}

// replay sends the recorded answer r again, marked as a replay.
func (ex *exchange) replay(ctx context.Context, r *server.Response) (any, error) {
	a, err := decodeAnswer(r)
	if err != nil {
		return nil, ex.emitErr(ex.status(codes.Internal, ReasonUnprotectable, "the recorded answer cannot be read", 0), err)
	}
	trailer := metadata.Join(a.trailer, metadata.Pairs(MetadataReplayed, "true"))
	if len(a.header) > 0 {
		_ = grpc.SetHeader(ctx, a.header)
	}
	_ = grpc.SetTrailer(ctx, trailer)
	var resp any
	if a.err() == nil {
		if resp, err = ex.message(a.message); err != nil {
			return nil, ex.emitErr(ex.status(codes.Internal, ReasonUnprotectable, err.Error(), 0), err)
		}
	}
	ex.emit(codes.Code(a.status.GetCode()), "")
	return resp, a.err()
}

// message decodes a recorded response message, of the method's output type.
func (ex *exchange) message(b []byte) (proto.Message, error) {
	if ex.output.output == nil {
		return nil, fmt.Errorf("idem: %s has no registered descriptor: its recorded response cannot be replayed", ex.method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(ex.output.output.FullName())
	if err != nil {
		return nil, fmt.Errorf("idem: the response type of %s is not registered: %v", ex.method, err)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, fmt.Errorf("idem: the recorded response of %s cannot be decoded: %v", ex.method, err)
	}
	return msg, nil
}

// status returns an answer of the interceptor's own as an error.
func (ex *exchange) status(code codes.Code, why, msg string, after time.Duration) error {
	ex.ev.Reason = why
	return withDetails(code, "idem: "+msg, why, after).Err()
}

// refuse answers with an error of the interceptor's own, with a pushback
// (after > 0) in the trailer and as a RetryInfo.
func (ex *exchange) refuse(code codes.Code, why, msg string, after time.Duration, cause error) (any, error) {
	if after > 0 {
		// Whole milliseconds, as gRFC A6 reads them.
		_ = grpc.SetTrailer(ex.ctx, metadata.Pairs(metadataPushback, strconv.FormatInt(after.Milliseconds(), 10)))
	}
	return nil, ex.emitErr(ex.status(code, why, msg, after), cause)
}

// emitErr reports err, the answer, with the cause behind it, and returns it.
func (ex *exchange) emitErr(err error, cause ...error) error {
	if len(cause) > 0 && cause[0] != nil {
		ex.ev.Err = cause[0]
	}
	st := status.Convert(err)
	if r := reason(st); r != "" {
		ex.ev.Reason = r
	}
	ex.emit(st.Code(), ex.ev.Reason)
	return err
}

func (ex *exchange) emit(code codes.Code, why string) {
	ex.ev.Code, ex.ev.Reason = uint32(code), why
	if f := ex.g.cfg.onOutcome; f != nil {
		f(ex.ev)
	}
}

// captureStream passes the handler's header and trailer metadata on to the
// call's stream, and keeps a copy to record.
type captureStream struct {
	grpc.ServerTransportStream
	header, trailer metadata.MD
}

func (s *captureStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return s.next().SetHeader(md)
}

func (s *captureStream) SendHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return s.next().SendHeader(md)
}

func (s *captureStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return s.next().SetTrailer(md)
}

// next is the call's own stream; a handler called outside a server (a test
// calling the interceptor directly) has none, and its metadata goes nowhere.
func (s *captureStream) next() grpc.ServerTransportStream {
	if s.ServerTransportStream == nil {
		return noStream{}
	}
	return s.ServerTransportStream
}

type noStream struct{}

func (noStream) Method() string                  { return "" }
func (noStream) SetHeader(metadata.MD) error     { return nil }
func (noStream) SendHeader(metadata.MD) error    { return nil }
func (noStream) SetTrailer(md metadata.MD) error { return nil }
