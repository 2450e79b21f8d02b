package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// storeRetryAfter is the Retry-After of a 503 answered because the store failed.
const storeRetryAfter = time.Second

// errStoreContract reports a Store whose Result contradicts the Store contract
// (a run that was not called but reported executed, a replay without a
// response, ...). The middleware answers 503 and sends nothing it cannot trust.
var errStoreContract = errors.New("idem/server: the store broke the Store contract")

// Middleware protects the requests of the configured methods (POST and PATCH
// by default) with an Idempotency-Key, recording their responses in store.
// docs/CONTRACT.md in the repository (§3) says what each request gets. It panics when
// store is nil or an option is impossible, and the returned function panics on
// a nil handler.
func Middleware(store Store, opts ...Option) func(http.Handler) http.Handler {
	if store == nil {
		badArg("Middleware(nil)", "a Store")
	}
	cfg := newConfig("Middleware", opts)
	return func(next http.Handler) http.Handler {
		if next == nil {
			badArg("Middleware(...)(nil)", "an http.Handler")
		}
		return &protected{store: store, cfg: cfg, next: next, serveNext: func(w http.ResponseWriter, r *http.Request) bool {
			next.ServeHTTP(w, r)
			return true
		}}
	}
}

// protected is a handler behind the middleware.
type protected struct {
	store Store
	cfg   *config
	next  http.Handler
	// serveNext runs next; a handler in net/http always answers (an
	// implicit 200 when it writes nothing).
	serveNext func(w http.ResponseWriter, r *http.Request) bool
	// recent holds the handler's recent run durations, for the 409's
	// Retry-After.
	recent durations
}

func (p *protected) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.cfg.needsKey(r.Method) {
		p.next.ServeHTTP(w, r)
		return
	}
	ex := &exchange{p: p, w: w, r: r, handler: p.serveNext}
	ex.serve()
}

// exchange is the state of one protected request.
type exchange struct {
	p    *protected
	w    http.ResponseWriter
	r    *http.Request
	cw   captureWriter
	body bodyReader
	ev   OutcomeEvent
	// handler runs the protected handler and reports whether it answered
	// (see Guard.Serve); ctx, given to the store, is the request's context
	// with effect, the DeclareEffect and BeginEffect flag.
	handler func(w http.ResponseWriter, r *http.Request) bool
	ctx     effectContext
	effect  effectFlag

	start    time.Time // when the store was asked
	ran      bool      // run was called
	keep     bool      // run said the response may be recorded
	panicked bool      // the handler panicked with ev.Panic
	// unanswered: the handler left its answer to an outer layer.
	unanswered bool
	// unknown: the handler declared its effect, then failed in a way that
	// cannot be recorded; ProblemOutcomeUnknown is recorded in its place.
	unknown bool
}

func (ex *exchange) serve() {
	cfg, r := ex.p.cfg, ex.r
	key, err := headerKey(r.Header, cfg.maxKeyLength)
	if err != nil {
		if errors.Is(err, ErrMissingKey) {
			ex.problem(Problem{Type: ProblemMissingKey, Title: "Idempotency-Key required", Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("%s %s needs an Idempotency-Key header", r.Method, r.URL.Path)}, err)
			return
		}
		ex.problem(Problem{Type: ProblemInvalidKey, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest,
			Detail: detail(err)}, err)
		return
	}
	ex.ev.Key = key

	var scope string
	if cfg.scope != nil {
		if scope, err = cfg.scope(r); err != nil {
			ex.problem(Problem{Type: ProblemUnauthenticated, Title: "No usable credentials", Status: http.StatusUnauthorized,
				Detail: "the request's principal could not be established"}, err)
			return
		}
	}

	body, err := readBody(r, cfg.maxBodyBytes)
	if err != nil {
		if errors.Is(err, errBodyTooLarge) {
			ex.problem(Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
				Detail: bodyLimitDetail(err, cfg.maxBodyBytes)}, err)
			return
		}
		ex.problem(Problem{Type: ProblemBodyUnreadable, Title: "Request body unreadable", Status: http.StatusBadRequest,
			Detail: "the request body could not be read"}, err)
		return
	}

	req := Request{Scope: scope, Key: key, Fingerprint: cfg.fingerprint(r, body), TTL: cfg.ttl, LockTTL: cfg.lockTTL,
		Wait: ex.wait()}
	ex.body.Reset(body)
	r.Body = &ex.body
	r.ContentLength = int64(len(body))
	ex.cw = captureWriter{rw: ex.w, max: cfg.maxResponseBytes}
	ex.ctx = effectContext{Context: r.Context(), flag: &ex.effect}

	ex.start = cfg.now()
	res, err := ex.p.store.Do(&ex.ctx, req, ex.run)
	ex.ev.StoreDuration = cfg.now().Sub(ex.start) - ex.ev.HandlerDuration
	ex.finish(res, err)
}

// wait returns how long a duplicate of this request may wait for the first:
// the middleware's limit, or the client's Prefer: wait when it is shorter
// (then Preference-Applied says so on the answer).
func (ex *exchange) wait() time.Duration {
	limit := ex.p.cfg.inProgressWait
	pref, ok := preferWait(ex.r.Header)
	if !ok || pref > limit {
		return limit
	}
	ex.w.Header().Set(HeaderPreferenceApplied, "wait="+strconv.FormatInt(int64(pref/time.Second), 10))
	return pref
}

// headerKey returns the request's key: the single Idempotency-Key line, parsed.
func headerKey(h http.Header, max int) (string, error) {
	vs := h[HeaderKey]
	switch len(vs) {
	case 0:
		return "", ErrMissingKey
	case 1:
		return parseKey(vs[0], max)
	}
	return "", fmt.Errorf("%w: %d Idempotency-Key header lines (one is allowed)", ErrInvalidKey, len(vs))
}

// run is the RunFunc the store calls: it runs the handler once, capturing its
// response, and says whether the response may be recorded.
func (ex *exchange) run(ctx context.Context) (resp *Response, keep bool) {
	if ex.ran {
		panic("server: the Store called RunFunc twice")
	}
	ex.ran = true
	r := ex.r.WithContext(ctx) // ctx carries the effect flag
	offerDecodable(r)
	defer func() {
		if v := recover(); v != nil {
			ex.panicked, ex.ev.Panic = true, v
			resp, keep = ex.failed()
		}
	}()
	start := ex.p.cfg.now()
	answered := ex.handler(&ex.cw, r)
	ex.ev.HandlerDuration = ex.p.cfg.now().Sub(start)
	ex.p.recent.add(ex.ev.HandlerDuration)
	if ex.cw.hijacked || ex.cw.tooLarge || !answered {
		ex.unanswered = !answered
		return ex.failed()
	}
	resp = ex.cw.record(ex.p.cfg.storedHeaders)
	// After DeclareEffect or BeginEffect every answer is the outcome, a 5xx
	// included.
	ex.keep = recorded(resp.Status) || ex.effect.happened()
	if ex.keep {
		if ex.cw.undecodable = checkDecodable(resp, ex.p.cfg.maxResponseBytes); ex.cw.undecodable != nil {
			ex.keep = false
			return ex.failed()
		}
	}
	return resp, ex.keep
}

// failed is run's result when the handler's response cannot be recorded (a
// panic, a refused hijack, a response over the limit, an answer left to an
// outer layer): a 500 that is not kept, so the key is released; or, when the
// handler declared its effect, the outcome-unknown problem, kept, so that no
// retry runs the effect again.
func (ex *exchange) failed() (*Response, bool) {
	if !ex.effect.happened() {
		return &Response{Status: http.StatusInternalServerError}, false
	}
	ex.unknown, ex.keep = true, true
	return problemResponse(outcomeUnknown), true
}

// problemResponse is p as a Response to record: what writeProblem sends,
// Content-Length aside (computed on each send).
func problemResponse(p Problem) *Response {
	cw := captureWriter{max: DefaultMaxResponseBytes}
	writeProblem(&cw, p)
	delete(cw.header, "Content-Length")
	return &Response{Status: cw.finalStatus(), Header: cw.header, Body: cw.body}
}

// recorded reports whether a response with status is recorded for its key
// and replayed to its retries. Most 2xx and 4xx answers are the operation's
// outcome and are recorded. Not recorded (the key is released, so a retry,
// or the next hop, runs the handler again):
//   - 5xx: the server failed;
//   - 3xx: the operation is not done here (a 307 or 308 sends the same
//     request, key included, to another URL, whose fingerprint differs);
//   - refusals, the 4xx that say the request was refused before anything was
//     done (400, 401, 403, 405, 406, 408, 411, 413, 414, 415, 422, 429, 431):
//     recording them would let a flood of invalid requests take the store's
//     room, and a corrected request, or the same one once the client is
//     authorised or no longer throttled, deserves to run. A handler must
//     answer these only when it did nothing.
func recorded(status int) bool {
	switch {
	case status >= 500, status >= 300 && status < 400:
		return false
	case status >= 400:
		return !refusal[status]
	}
	return true
}

// refusal lists the 4xx statuses that are not recorded (see recorded).
var refusal = map[int]bool{
	http.StatusBadRequest: true, http.StatusUnauthorized: true, http.StatusForbidden: true,
	http.StatusMethodNotAllowed: true, http.StatusNotAcceptable: true, http.StatusRequestTimeout: true,
	http.StatusLengthRequired: true, http.StatusRequestEntityTooLarge: true, http.StatusRequestURITooLong: true,
	http.StatusUnsupportedMediaType: true, http.StatusUnprocessableEntity: true, http.StatusTooManyRequests: true,
	http.StatusRequestHeaderFieldsTooLarge: true,
}

// finish answers the request from the store's result. Each decision is one
// step: a panic goes on; a store error, or a result that breaks the Store
// contract, is the store's failure; otherwise the outcome chooses the answer.
func (ex *exchange) finish(res Result, err error) {
	ex.ev.Outcome, ex.ev.Waited = res.Outcome, res.Waited
	if ex.panicked {
		ex.ev.Err = err
		ex.ev.Stored = ex.unknown && err == nil // the outcome-unknown record
		ex.emit()
		panic(ex.ev.Panic)
	}
	if err == nil {
		err = ex.checkResult(res)
	}
	if err != nil {
		ex.storeFailed(err)
		return
	}
	switch res.Outcome {
	case OutcomeExecuted:
		ex.sendExecuted()
	case OutcomeReplayed:
		ex.replay(res.Response)
	case OutcomeMismatch:
		ex.problem(Problem{Type: ProblemMismatch, Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity,
			Detail: "this Idempotency-Key was used for a different request"}, nil)
	case OutcomeInProgress:
		ex.inProgress(res.RetryAfter)
	case OutcomeUnknown:
		ex.problem(outcomeUnknown, nil)
	}
}

// checkResult reports a Result that contradicts the Store contract: an
// outcome that does not match whether run was called, a replay without a
// response, an outcome the middleware does not know.
func (ex *exchange) checkResult(res Result) error {
	switch {
	case ex.ran != (res.Outcome == OutcomeExecuted):
		return fmt.Errorf("%w: outcome %v after the handler ran=%v", errStoreContract, res.Outcome, ex.ran)
	case res.Outcome == OutcomeReplayed && res.Response == nil:
		return fmt.Errorf("%w: replay without a response", errStoreContract)
	case res.Outcome < OutcomeExecuted || res.Outcome > OutcomeUnknown:
		return fmt.Errorf("%w: unknown outcome %d", errStoreContract, int(res.Outcome))
	}
	return nil
}

// storeFailed answers a store failure. Before the handler ran, the request
// was not processed: 503, retry. After it ran (the store could not record its
// response: ErrNotRecorded, or any error past run), the handler's effect may
// stand: the unrecorded response is not sent, and the answer is
// outcome-unknown, which never invites a retry; the store keeps the key
// blocked, so a retry gets the same answer rather than a second effect.
func (ex *exchange) storeFailed(err error) {
	ex.ev.Outcome = 0
	if !ex.ran {
		ex.problem(storeUnavailable, err)
		return
	}
	ex.ev.Outcome = OutcomeUnknown
	ex.problem(outcomeUnknown, err)
}

// outcomeUnknown is the answer when the handler ran (or an earlier run did)
// and its response could not be recorded. 500: the server failed, and the
// client cannot fix the request; no Retry-After, since waiting changes
// nothing. See docs/problems.md#outcome-unknown.
var outcomeUnknown = Problem{Type: ProblemOutcomeUnknown, Title: "Outcome unknown",
	Status: http.StatusInternalServerError,
	Detail: "the request was processed but its response could not be recorded; " +
		"it may have taken effect, and this key will get this same answer until an operator resolves it"}

// storeUnavailable is the answer when the store fails before the handler ran.
var storeUnavailable = Problem{Type: ProblemStoreUnavailable, Title: "Idempotency store unavailable",
	Status: http.StatusServiceUnavailable, RetryAfter: storeRetryAfter,
	Detail: "the request was not processed; retry with the same Idempotency-Key"}

// sendExecuted sends the handler's captured response, unless it could not be
// recorded: after a declared effect, the outcome-unknown problem recorded in
// its place; else a 500 for a refused hijack or a response over the limit,
// and nothing for an answer left to an outer layer.
func (ex *exchange) sendExecuted() {
	switch {
	case ex.unknown:
		ex.ev.Stored = true
		ex.problem(outcomeUnknown, nil)
		return
	case ex.unanswered:
		ex.ev.Status = 0
		ex.emit()
		return
	case ex.cw.hijacked:
		ex.problem(Problem{Type: ProblemUnprotectable, Title: "Handler not protectable",
			Status: http.StatusInternalServerError,
			Detail: "the handler tried to take over the connection, which cannot be recorded"}, ErrUnprotectable)
		return
	case ex.cw.tooLarge:
		ex.problem(Problem{Type: ProblemUnprotectable, Title: "Response too large to record",
			Status: http.StatusInternalServerError,
			Detail: fmt.Sprintf("the response exceeded %d bytes and could not be recorded (see WithMaxResponseBytes)",
				ex.p.cfg.maxResponseBytes)}, ErrResponseTooLarge)
		return
	case ex.cw.undecodable != nil:
		ex.problem(Problem{Type: ProblemUnprotectable, Title: "Response encoding not recordable",
			Status: http.StatusInternalServerError, Detail: detail(ex.cw.undecodable) +
				"; a retry that does not accept it could not be answered"}, ex.cw.undecodable)
		return
	}
	ex.cw.send()
	ex.ev.Status, ex.ev.Stored = ex.cw.finalStatus(), ex.keep
	ex.emit()
}

// inProgress answers 409: another request with the key still runs, past
// this duplicate's wait. Retry-After is a short estimate of when the answer
// will exist (see inProgressRetryAfter), never more than the owner's lease.
func (ex *exchange) inProgress(lease time.Duration) {
	p90, known := ex.p.recent.p90()
	after := inProgressRetryAfter(p90, known, ex.p.cfg.now().Sub(ex.start), lease)
	ex.problem(Problem{Type: ProblemInProgress, Title: "Request in progress", Status: http.StatusConflict,
		RetryAfter: after, Detail: "a request with this Idempotency-Key is still being processed"}, nil)
}

// problem answers with p and reports the event.
func (ex *exchange) problem(p Problem, err error) {
	writeProblem(ex.w, p)
	ex.ev.Status, ex.ev.Problem, ex.ev.Err = p.Status, p.Type, err
	ex.emit()
}

func (ex *exchange) emit() {
	if f := ex.p.cfg.onOutcome; f != nil {
		ex.ev.Request = ex.r
		f(ex.ev)
	}
}

// detail turns an error of this package into a problem detail.
func detail(err error) string {
	return strings.TrimPrefix(err.Error(), "idem/server: ")
}
