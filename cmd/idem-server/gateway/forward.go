package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/demo/cause"
	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// Problem types of the gateway's own answers (docs/problems.md), besides the
// middleware's.
const (
	// ProblemUpstreamUnreachable: nothing of the request reached the upstream
	// (a refused or timed-out connection, a failed TLS handshake): the key
	// is released, a retry with it is safe.
	ProblemUpstreamUnreachable = server.ProblemBase + "upstream-unreachable"
	// ProblemUpstreamUnanswered: the upstream's answer was lost, and the key
	// is released all the same: its status said it did nothing, or, with
	// Config.UpstreamDedupes, it deduplicates a retry with the same key.
	ProblemUpstreamUnanswered = server.ProblemBase + "upstream-unanswered"
	// ProblemUpstreamTooLarge: the upstream's answer is too large to record,
	// and the key is released (as for ProblemUpstreamUnanswered).
	ProblemUpstreamTooLarge = server.ProblemBase + "upstream-answer-too-large"
)

// errMark is BeginEffect's failure: the store could not mark the effect, so
// the request was not sent.
type errMark struct{ err error }

func (e *errMark) Error() string { return "the store could not mark the effect: " + e.err.Error() }
func (e *errMark) Unwrap() error { return e.err }

// errTooLarge: the upstream's answer is longer than Config.MaxResponseBytes.
var errTooLarge = errors.New("the upstream's answer is larger than Config.MaxResponseBytes")

// errSwitched: the upstream switched protocols (101) on a protected request,
// whose upgrade headers the gateway had removed.
var errSwitched = errors.New("the upstream switched protocols on a protected request")

// forwarder sends a protected request to the upstream, behind
// server.Middleware, with httputil.ReverseProxy. What each upstream answer
// means for the key is the table in docs/CONTRACT.md ("idem-server as a
// gateway"); in short:
//
//   - right before the request leaves (the transport, once per request) it
//     calls server.BeginEffect, which makes the store's durable mark: from
//     then on the answer is recorded whatever its status, and a crash of the
//     gateway leaves the key outcome-unknown;
//   - when the transport fails before a byte of the request left (a refused
//     dial, DNS, TLS, a connection closed before the first write; see
//     upstream.go), server.CancelEffect, 502 upstream-unreachable, the key
//     released;
//   - when the upstream's status says it did nothing (the refusals the
//     middleware releases, 503 with Retry-After, 307, 308):
//     server.CancelEffect, so the middleware judges the answer by its status
//     and releases the key;
//   - when the connection fails or times out after bytes of the request
//     left, the upstream may have acted: 502 or 504 outcome-unknown,
//     recorded.
//
// Protected requests reuse kept-alive connections where net/http cannot send
// them twice, and go on a new connection each otherwise: upstream.go holds
// the transports and the argument.
//
// With Config.UpstreamDedupes it marks nothing: the middleware's rules apply as
// to a handler's answer (a 5xx releases the key), since the upstream
// deduplicates a second forward with the same key.
//
// The call to the upstream is detached from the client: a client that goes
// away mid-forward does not cut it (the answer is recorded, and the retry
// replays it); Config.UpstreamTimeout bounds it.
type forwarder struct {
	proxy *httputil.ReverseProxy
	cfg   Config
}

// newForwarder returns the forwarder of cfg, whose connections to the
// upstream dial reaches (nil: net/http's default dialer).
func newForwarder(cfg Config, dial dialFunc) *forwarder {
	f := &forwarder{cfg: cfg}
	f.proxy = &httputil.ReverseProxy{
		Rewrite: f.rewrite,
		Transport: &effectTransport{
			reuse: upstreamTransport(dial, cfg.UpstreamRootCAs, true),
			fresh: upstreamTransport(dial, cfg.UpstreamRootCAs, false),
			mark:  !cfg.UpstreamDedupes,
		},
		ModifyResponse: f.readAnswer,
		ErrorHandler:   f.fail,
	}
	return f
}

// forwardState is what one protected request's forward learned, shared by
// the transport, ModifyResponse and the error handler through the request's
// context.
type forwardState struct {
	sent     atomic.Bool // an answer came, or bytes of the request left (see upstream.go)
	declined atomic.Bool // the upstream's status says it did nothing
}

type forwardStateKey struct{}

func stateOf(ctx context.Context) *forwardState {
	st, _ := ctx.Value(forwardStateKey{}).(*forwardState)
	return st
}

// ServeHTTP forwards r. The chaos hooks sit where a handler's business write
// would: Chaos-Delay before the forward, Chaos-Delay-After-Write and
// Chaos-Crash after the upstream's answer, before the middleware records it.
func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := f.cfg.Chaos.BeforeWrite(r); err != nil {
		problem.Write(w, problem.Details{Type: chaos.ProblemInjected, Title: "Injected delay interrupted",
			Status: http.StatusServiceUnavailable, Detail: "the client left during Chaos-Delay; nothing was forwarded"})
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), f.cfg.UpstreamTimeout)
	defer cancel()
	st := &forwardState{}
	f.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, forwardStateKey{}, st)))
	if st.sent.Load() {
		f.cfg.Chaos.AfterWrite(r)
	}
}

// rewrite builds the outbound request: rewriteOut's URL and forwarding
// headers; the key, parsed, under Config.ForwardKeyHeader (or none without
// Config.ForwardKey); no upgrade (a switched connection cannot be recorded);
// with Config.ChaosHeaders, none of the Chaos-* headers, which are the
// gateway's; and what lets it go on a kept-alive connection (upstream.go):
// an Idempotency-Key or X-Idempotency-Key header (the forwarded key, or the
// caller's own) under its name in lower case, and a GetBody.
func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	rewriteOut(pr, f.cfg.Upstream)
	h := pr.Out.Header
	key, err := server.ParseKey(pr.In.Header.Get(server.HeaderKey))
	delete(h, server.HeaderKey)
	if f.cfg.ForwardKey && err == nil { // the middleware refused an invalid key already
		h.Set(f.cfg.ForwardKeyHeader, key)
	}
	h.Del("Upgrade")
	h.Del("Connection")
	if f.cfg.ChaosHeaders {
		for _, name := range chaosHeaders {
			h.Del(name)
		}
	}
	hideReplayableKeys(h)
	setGetBody(pr)
}

// effectTransport marks the effect right before the request leaves, sends
// it on a kept-alive connection when net/http cannot send it twice there
// (reusable) and on a new one otherwise, and withdraws the mark when not a
// byte of it left (upstream.go says why each of those holds).
type effectTransport struct {
	reuse, fresh http.RoundTripper
	mark         bool // false with Config.UpstreamDedupes
}

func (t *effectTransport) RoundTrip(out *http.Request) (*http.Response, error) {
	ctx := out.Context()
	st := stateOf(ctx)
	if t.mark {
		if err := server.BeginEffect(ctx); err != nil {
			return nil, &errMark{err}
		}
	}
	next := t.fresh
	if reusable(out) {
		next = t.reuse
	}
	var last attempt
	resp, err := next.RoundTrip(out.WithContext(httptrace.WithClientTrace(ctx, last.trace())))
	st.sent.Store(err == nil || last.wrote())
	if !st.sent.Load() && t.mark {
		server.CancelEffect(ctx)
	}
	return resp, err
}

// readAnswer runs on the upstream's answer before anything of it is
// written: it withdraws the effect when the status says the upstream did
// nothing, then reads the body whole (it is recorded whole anyway), so that
// a body too large to record, or cut, is an error answered by fail rather
// than half sent.
func (f *forwarder) readAnswer(resp *http.Response) error {
	ctx := resp.Request.Context()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return errSwitched
	}
	if declined(resp) {
		stateOf(ctx).declined.Store(true)
		if !f.cfg.UpstreamDedupes {
			server.CancelEffect(ctx)
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxResponseBytes+1))
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return fmt.Errorf("reading the upstream's answer: %w", err)
	case int64(len(body)) > f.cfg.MaxResponseBytes:
		return errTooLarge
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// declined reports whether the upstream's answer says it did nothing with
// the request: a refusal that the middleware releases when a handler answers
// it (refusals), a 503 that says when to come back (Retry-After), or a 307
// or 308, which sends the same request elsewhere. Every other answer may
// follow an effect and is recorded: an upstream the gateway does not own may
// have acted before it failed (a 500, a 502 of its own proxy, a 503 without
// Retry-After) or redirected (a 303 after a POST that created something).
func declined(resp *http.Response) bool {
	switch s := resp.StatusCode; {
	case refusals[s]:
		return true
	case s == http.StatusServiceUnavailable:
		return resp.Header.Get("Retry-After") != ""
	case s == http.StatusTemporaryRedirect, s == http.StatusPermanentRedirect:
		return true
	}
	return false
}

// refusals are the 4xx statuses server.Middleware does not record (the key
// is released): a request refused before anything was done
// (TestGatewayRefusalsAreTheMiddlewares checks that the lists agree).
var refusals = map[int]bool{
	http.StatusBadRequest: true, http.StatusUnauthorized: true, http.StatusForbidden: true,
	http.StatusMethodNotAllowed: true, http.StatusNotAcceptable: true, http.StatusRequestTimeout: true,
	http.StatusLengthRequired: true, http.StatusRequestEntityTooLarge: true, http.StatusRequestURITooLong: true,
	http.StatusUnsupportedMediaType: true, http.StatusUnprocessableEntity: true, http.StatusTooManyRequests: true,
	http.StatusRequestHeaderFieldsTooLarge: true,
}

// fail answers a forward that got no answer it can pass on (see forwarder):
// the error handler of its ReverseProxy.
func (f *forwarder) fail(w http.ResponseWriter, r *http.Request, err error) {
	cause.Report(r.Context(), err)
	st := stateOf(r.Context())
	// released: nothing to keep, the middleware releases the 5xx: the
	// upstream said it did nothing, or it deduplicates a retry.
	released := st.declined.Load() || f.cfg.UpstreamDedupes
	var mark *errMark
	switch {
	case errors.As(err, &mark):
		problem.Write(w, problem.Details{Type: server.ProblemStoreUnavailable, Title: "Idempotency store unavailable",
			Status: http.StatusServiceUnavailable, RetryAfter: storeRetryAfter,
			Detail: "the request was not forwarded: the store could not mark it; retry with the same Idempotency-Key"})
	case !st.sent.Load():
		problem.Write(w, problem.Details{Type: ProblemUpstreamUnreachable, Title: "Upstream unreachable",
			Status: gatewayStatus(err), RetryAfter: storeRetryAfter,
			Detail: "the upstream could not be reached (" + reason(err) + "); nothing was sent: retry with the same Idempotency-Key"})
	case released && errors.Is(err, errTooLarge):
		problem.Write(w, problem.Details{Type: ProblemUpstreamTooLarge, Title: "Upstream answer too large",
			Status: http.StatusBadGateway,
			Detail: "the upstream's answer is larger than Config.MaxResponseBytes, and the key is free: retry with the same Idempotency-Key"})
	case released:
		problem.Write(w, problem.Details{Type: ProblemUpstreamUnanswered, Title: "Upstream answer lost",
			Status: gatewayStatus(err),
			Detail: "the upstream's answer was lost (" + reason(err) + "), and the key is free: retry with the same Idempotency-Key"})
	default:
		problem.Write(w, problem.Details{Type: server.ProblemOutcomeUnknown, Title: "Outcome unknown",
			Status: gatewayStatus(err),
			Detail: "the request reached the upstream, which may have acted, but its answer was lost (" + reason(err) +
				"); this key will get this same answer"})
	}
}

// storeRetryAfter is the Retry-After of the gateway's 503 when the store
// cannot mark an effect (as the middleware's when the store fails), and of
// its 502 when the upstream cannot be reached.
const storeRetryAfter = time.Second

// gatewayStatus is 504 for a time-out, else 502.
func gatewayStatus(err error) int {
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// reason names what failed, for a problem's detail: the time-out, the
// answer too large, or the error without the request's URL.
func reason(err error) string {
	var uerr *url.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "the upstream time-out passed"
	case errors.Is(err, errTooLarge), errors.Is(err, errSwitched):
		return err.Error()
	case errors.As(err, &uerr):
		return uerr.Err.Error()
	}
	return err.Error()
}

// chaosHeaders are the request headers -chaos reads: addressed to the
// gateway, they are not forwarded.
var chaosHeaders = []string{chaos.HeaderDelay, chaos.HeaderDelayAfterWrite, chaos.HeaderFail, chaos.HeaderRetryAfter,
	chaos.HeaderCrash, chaos.HeaderDrop}
