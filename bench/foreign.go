package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/idemkit/idem"
)

// ForeignKind is what the server of a scenario of section 6 does: a server
// that does not implement idem's keys, as most APIs a Go program calls.
type ForeignKind int

const (
	// ForeignConflict answers every POST 409 {"error":"username already
	// taken"}: a real conflict, the answer the caller needs at once.
	ForeignConflict ForeignKind = iota + 1
	// ForeignInProgress is an idempotency middleware of its own, as npm's
	// express-idempotency: the first request with a key runs the handler for
	// Handler; a duplicate with the key while it runs is answered 409 with no
	// Retry-After and no problem type; a duplicate after it is answered the
	// stored response.
	ForeignInProgress
	// ForeignOutage answers every request 503 (no Retry-After) for Outage,
	// from the moment the operations start, then 201.
	ForeignOutage
	// ForeignRefused stops listening for Outage, from the moment the
	// operations start (every connection is refused), then serves 201.
	ForeignRefused
	// ForeignSustained answers every request 503 (no Retry-After) for the
	// whole row, while operations start at Rate per second for Duration.
	ForeignSustained
)

// ForeignScenario is one scenario of section 6.
type ForeignScenario struct {
	Name string
	Kind ForeignKind
	// Handler is how long ForeignInProgress's handler runs.
	Handler time.Duration
	// Outage is how long ForeignOutage and ForeignRefused are down.
	Outage time.Duration
	// Rate and Duration set ForeignSustained's open-loop stream of
	// operations: Rate started per second for Duration.
	Rate     int
	Duration time.Duration
	// Ops, if not 0, replaces ForeignConfig.Ops for this scenario.
	Ops int
}

// streamOps is the number of operations of ForeignSustained's stream.
func (sc ForeignScenario) streamOps() int { return int(float64(sc.Rate) * sc.Duration.Seconds()) }

// validate reports a setting of sc that the run could not honour.
func (sc ForeignScenario) validate() error {
	switch sc.Kind {
	case ForeignConflict:
	case ForeignInProgress:
		if sc.Handler <= 0 {
			return fmt.Errorf("the handler's time (Handler) %v: want more than 0", sc.Handler)
		}
	case ForeignOutage, ForeignRefused:
		if sc.Outage <= 0 {
			return fmt.Errorf("the outage (Outage) %v: want more than 0", sc.Outage)
		}
	case ForeignSustained:
		if sc.Rate <= 0 || sc.Duration <= 0 || sc.streamOps() < 1 {
			return fmt.Errorf("the stream (Rate %d, Duration %v): want at least one operation", sc.Rate, sc.Duration)
		}
	default:
		return fmt.Errorf("no kind %d", sc.Kind)
	}
	return nil
}

// ForeignConfig sets up section 6.
type ForeignConfig struct {
	// Ops is the number of operations of every row but the sustained
	// outage's (pairs of an original and its duplicate for
	// ForeignInProgress), unless the scenario sets its own. They all start
	// at once.
	Ops int
	// DuplicateDelayMax: a duplicate is sent U[0, DuplicateDelayMax) after
	// the server has taken its original's key.
	DuplicateDelayMax time.Duration
	Scenarios         []ForeignScenario
	// Seed seeds the duplicates' delays.
	Seed uint64
}

// DefaultForeign returns the full run's section 6: a real conflict, 50
// operations at once; duplicates in flight against a 3 s and an 8 s handler,
// a 3 s outage answered 503 and one with connections refused, each with 20
// operations at once and with 50 (more than a Transport's default retry quota
// pays for); and a sustained outage, 100 operations per second for 5 s
// against a server answering 503.
func DefaultForeign() ForeignConfig {
	cfg := ForeignConfig{
		Ops:               50,
		DuplicateDelayMax: time.Second,
		Scenarios: []ForeignScenario{
			{Name: `plain 409, 50 operations at once: a real conflict (409 {"error":"username already taken"} to every POST)`, Kind: ForeignConflict},
		},
		Seed: 1,
	}
	for _, h := range []time.Duration{3 * time.Second, 8 * time.Second} {
		for _, n := range []int{20, 50} {
			cfg.Scenarios = append(cfg.Scenarios, ForeignScenario{Kind: ForeignInProgress, Handler: h, Ops: n,
				Name: fmt.Sprintf("bare in-progress 409, %d duplicates at once, each while a %v handler runs (409, no Retry-After)", n, h)})
		}
	}
	for _, kind := range []ForeignKind{ForeignOutage, ForeignRefused} {
		what := "every request answered 503"
		if kind == ForeignRefused {
			what = "every connection refused"
		}
		for _, n := range []int{20, 50} {
			cfg.Scenarios = append(cfg.Scenarios, ForeignScenario{Kind: kind, Outage: 3 * time.Second, Ops: n,
				Name: fmt.Sprintf("3 s total outage, %d operations at once: %s, then healthy", n, what)})
		}
	}
	cfg.Scenarios = append(cfg.Scenarios, SustainedOutage(100, 5*time.Second))
	return cfg
}

// SustainedOutage returns the ForeignSustained scenario: rate operations per
// second for d against a server answering 503 to every request.
func SustainedOutage(rate int, d time.Duration) ForeignScenario {
	return ForeignScenario{Name: fmt.Sprintf("sustained outage: 503 to every request, %d operations/s for %v", rate, d),
		Kind: ForeignSustained, Rate: rate, Duration: d}
}

// ForeignClient is one client of section 6, on its defaults, as a new user
// sets it up.
type ForeignClient struct {
	Name string
	// Setup says how it is built, for the report.
	Setup string
	// New returns the client, sending every attempt through next.
	New func(next http.RoundTripper) *http.Client
}

// ForeignClients returns the three clients of section 6, each on its defaults:
// idem's Transport (what idem.NewClient() builds, over the bench's transport),
// go-retryablehttp's NewClient() through StandardClient (its logger off, which
// changes no decision), and failsafehttp's RoundTripper with the retry policy
// failsafehttp.NewRetryPolicyBuilder() builds.
func ForeignClients() []ForeignClient {
	return []ForeignClient{
		{Name: "idem", Setup: "`idem.NewTransport(next)`, as `idem.NewClient()`", New: func(next http.RoundTripper) *http.Client {
			return &http.Client{Transport: idem.NewTransport(next)}
		}},
		{Name: "go-retryablehttp", Setup: "`retryablehttp.NewClient()`, `Logger = nil`, `StandardClient()`", New: func(next http.RoundTripper) *http.Client {
			return newRetryableHTTP(next).StandardClient()
		}},
		{Name: "failsafe-go", Setup: "`failsafehttp.NewRoundTripper(next, failsafehttp.NewRetryPolicyBuilder().Build())`", New: func(next http.RoundTripper) *http.Client {
			return &http.Client{Transport: failsafehttp.NewRoundTripper(next, failsafehttp.NewRetryPolicyBuilder().Build())}
		}},
	}
}

// ForeignResult is one row of section 6: one client in one scenario.
type ForeignResult struct {
	Scenario ForeignScenario
	Client   string
	// Ops is the number of operations measured: for ForeignInProgress, the
	// duplicates (their originals are the setup).
	Ops int
	// Completed counts the operations whose caller got the outcome: the
	// conflict's 409 and its body; the stored 201 for a duplicate; a 201
	// after an outage.
	Completed int
	// Requests counts the attempts sent (refused connections included) by
	// the operations measured.
	Requests int
	// Answers counts what the callers got: a status code, or "error: " and
	// the error's text.
	Answers map[string]int
	// AnswerP50 and AnswerP99 are percentiles of the time from an
	// operation's start to its caller's answer, whatever it is; OutcomeP50
	// and OutcomeP99 the same with Never for the operations not completed.
	AnswerP50, AnswerP99, OutcomeP50, OutcomeP99 time.Duration
	// LateP50 and LateP99 (ForeignInProgress) are percentiles, over the
	// completed duplicates, of the time from the server storing the
	// original's response to the duplicate's caller getting it: how long
	// after the answer existed the client delivered it.
	LateP50, LateP99 time.Duration
	// SetupFailures (ForeignInProgress) counts originals not answered 201.
	SetupFailures int
	// Elapsed is the wall time of the row.
	Elapsed time.Duration
}

// RequestsPerOp returns Requests/Ops.
func (r ForeignResult) RequestsPerOp() float64 { return ratio(r.Requests, r.Ops) }

// CompletedShare returns Completed/Ops.
func (r ForeignResult) CompletedShare() float64 { return ratio(r.Completed, r.Ops) }

// RunForeign runs every client in every scenario, each row against a server of
// its own; the scenarios one after the other, the clients of a scenario at
// the same time (the times measured are the retry layers' waits, hundreds of
// milliseconds to seconds, which three rows side by side barely touch).
func RunForeign(ctx context.Context, cfg ForeignConfig, clients []ForeignClient) ([]ForeignResult, error) {
	if cfg.Ops <= 0 || cfg.DuplicateDelayMax < 0 {
		return nil, fmt.Errorf("bench: RunForeign: Ops must be positive and DuplicateDelayMax not negative")
	}
	for _, sc := range cfg.Scenarios {
		if err := sc.validate(); err != nil {
			return nil, fmt.Errorf("bench: RunForeign: scenario %q: %w", sc.Name, err)
		}
	}
	var out []ForeignResult
	for si, sc := range cfg.Scenarios {
		rows := make([]ForeignResult, len(clients))
		errs := make([]error, len(clients))
		var wg sync.WaitGroup
		for ci, c := range clients {
			wg.Go(func() {
				rows[ci], errs[ci] = runForeignRow(ctx, cfg, sc, c, cfg.Seed^uint64(si)<<32^uint64(ci))
				if errs[ci] != nil {
					errs[ci] = fmt.Errorf("bench: foreign %q, %s: %w", sc.Name, c.Name, errs[ci])
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// foreignOp is what one operation of section 6 came to.
type foreignOp struct {
	took     time.Duration
	end      time.Time
	requests int
	status   int // 0 when the caller got an error
	body     []byte
	err      error
}

// answer names what the caller got, for ForeignResult.Answers.
func (o foreignOp) answer() string {
	if o.err != nil {
		return "error: " + errorLabel(o.err)
	}
	return strconv.Itoa(o.status)
}

// errorLabel is err's text, but for failsafe-go's ExceededError, whose text
// prints the whole last response (its date, its pointers): that response's
// status instead.
func errorLabel(err error) string {
	ee := retrypolicy.AsExceededError(err)
	if ee == nil {
		return err.Error()
	}
	if resp, ok := ee.LastResult.(*http.Response); ok && resp != nil {
		return fmt.Sprintf("%v (last result: a %d response)", retrypolicy.ErrExceeded, resp.StatusCode)
	}
	return fmt.Sprintf("%v (last error: %v)", retrypolicy.ErrExceeded, ee.LastError)
}

// closeExceeded closes the body of the last response that failsafe-go's
// ExceededError holds, if any: the caller owns it.
func closeExceeded(err error) {
	if ee := retrypolicy.AsExceededError(err); ee != nil {
		if resp, ok := ee.LastResult.(*http.Response); ok && resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
	}
}

// foreignBody is what every operation posts.
var foreignBody = []byte(`{"username":"ada","email":"ada@example.com"}`)

// sendForeign makes one operation: a POST of foreignBody to url through
// client, with key on its Idempotency-Key header unless it is empty; the
// attempts are counted by countingTransport under the client's retry layer.
func sendForeign(ctx context.Context, client *http.Client, url, key string) foreignOp {
	var n atomic.Int64
	ctx = withAttemptCounter(ctx, &n)
	start := time.Now()
	op := func() foreignOp {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(foreignBody))
		if err != nil {
			return foreignOp{err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			closeExceeded(err)
			return foreignOp{err: err}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return foreignOp{err: fmt.Errorf("reading the %d response: %w", resp.StatusCode, err)}
		}
		return foreignOp{status: resp.StatusCode, body: body}
	}()
	op.end = time.Now()
	op.took = op.end.Sub(start)
	op.requests = int(n.Load())
	return op
}

// runForeignRow runs client c in scenario sc against a server of its own.
func runForeignRow(ctx context.Context, cfg ForeignConfig, sc ForeignScenario, c ForeignClient, seed uint64) (ForeignResult, error) {
	if sc.Ops > 0 {
		cfg.Ops = sc.Ops
	}
	base := newBaseTransport()
	defer base.CloseIdleConnections()
	client := c.New(countingTransport{base})
	start := time.Now()
	var (
		ops  []foreignOp
		done func(i int, o foreignOp) bool // whether operation i got its outcome
		late []time.Duration               // per operation; -1 when not completed
		res  = ForeignResult{Scenario: sc, Client: c.Name}
		err  error
	)
	switch sc.Kind {
	case ForeignConflict:
		srv := httptest.NewServer(conflictHandler())
		defer srv.Close()
		ops = runAtOnce(cfg.Ops, func(int) foreignOp { return sendForeign(ctx, client, srv.URL+"/users", "") })
		done = func(_ int, o foreignOp) bool {
			return o.status == http.StatusConflict && bytes.Equal(o.body, conflictBody)
		}
	case ForeignInProgress:
		var pr pairsResult
		pr, err = runDuplicates(ctx, client, newInProgressServer(sc.Handler), cfg, seed)
		ops, late, res.SetupFailures = pr.dups, pr.late, pr.setupFailures
		done = func(i int, _ foreignOp) bool { return late[i] >= 0 }
	case ForeignOutage, ForeignRefused:
		ops, err = runOutage(ctx, client, sc, cfg.Ops)
		done = func(_ int, o foreignOp) bool { return o.status == http.StatusCreated }
	case ForeignSustained:
		ops, err = runSustained(ctx, client, sc)
		done = func(_ int, o foreignOp) bool { return o.status == http.StatusCreated }
	}
	if err != nil {
		return ForeignResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return ForeignResult{}, err
	}
	res.Elapsed = time.Since(start)
	summarizeForeign(&res, ops, done, late)
	return res, nil
}

// summarizeForeign fills res's counts and percentiles from ops; late, if not
// nil, holds each operation's time after the answer existed (-1: none).
func summarizeForeign(res *ForeignResult, ops []foreignOp, done func(int, foreignOp) bool, late []time.Duration) {
	res.Ops = len(ops)
	res.Answers = map[string]int{}
	took := make([]time.Duration, len(ops))
	failed := make([]bool, len(ops))
	var lates []time.Duration
	for i, o := range ops {
		res.Requests += o.requests
		res.Answers[o.answer()]++
		took[i] = o.took
		failed[i] = !done(i, o)
		if !failed[i] {
			res.Completed++
			if late != nil {
				lates = append(lates, late[i])
			}
		}
	}
	res.AnswerP50, res.AnswerP99, res.OutcomeP50, res.OutcomeP99 = timesToOutcome(took, failed)
	if len(lates) > 0 {
		slices.Sort(lates)
		res.LateP50, res.LateP99 = percentile(lates, 0.50), percentile(lates, 0.99)
	}
}

// runAtOnce runs n operations at once and returns them in order.
func runAtOnce(n int, op func(i int) foreignOp) []foreignOp {
	ops := make([]foreignOp, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ops[i] = op(i) })
	}
	wg.Wait()
	return ops
}

// conflictBody is the answer of ForeignConflict's server.
var conflictBody = []byte(`{"error":"username already taken"}` + "\n")

// conflictHandler answers every request 409 with conflictBody, as a plain API
// answers a POST that would create what exists (Kubernetes' AlreadyExists,
// a username taken).
func conflictHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write(conflictBody)
	})
}

// pairsResult is what runDuplicates measured: the duplicates, each one's time
// after the answer existed (-1 when it did not get the stored answer), and
// the originals not answered 201.
type pairsResult struct {
	dups          []foreignOp
	late          []time.Duration
	setupFailures int
}

// runDuplicates makes cfg.Ops pairs at once against ip, served on loopback:
// an original with key order-i, and, U[0, cfg.DuplicateDelayMax) after ip
// took that key, a duplicate with the same key.
func runDuplicates(ctx context.Context, client *http.Client, ip *inProgressServer, cfg ForeignConfig, seed uint64) (pairsResult, error) {
	srv := httptest.NewServer(ip)
	defer srv.Close()
	defer ip.Close() // first: the handlers still waiting return
	rng := rand.New(rand.NewPCG(seed, 0xd0b1e))
	delays := make([]time.Duration, cfg.Ops)
	for i := range delays {
		delays[i] = time.Duration(rng.Float64() * float64(cfg.DuplicateDelayMax))
	}
	res := pairsResult{dups: make([]foreignOp, cfg.Ops), late: make([]time.Duration, cfg.Ops)}
	origs := make([]foreignOp, cfg.Ops)
	errs := make([]error, cfg.Ops)
	var wg sync.WaitGroup
	for i := range cfg.Ops {
		key := "order-" + strconv.Itoa(i)
		claimed := ip.claimed(key)
		wg.Go(func() { origs[i] = sendForeign(ctx, client, srv.URL+"/orders", key) })
		wg.Go(func() {
			// The duplicate follows its original: wait (bounded) until the
			// server has taken the key, then the pair's delay.
			select {
			case <-claimed:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			case <-time.After(ip.handler + 10*time.Second):
				errs[i] = fmt.Errorf("the original with key %s never reached the server", key)
				return
			}
			select {
			case <-time.After(delays[i]):
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			res.dups[i] = sendForeign(ctx, client, srv.URL+"/orders", key)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return pairsResult{}, err
	}
	for i, d := range res.dups {
		if origs[i].status != http.StatusCreated {
			res.setupFailures++
		}
		res.late[i] = -1
		if stored, body, ok := ip.stored("order-" + strconv.Itoa(i)); ok && d.status == http.StatusCreated && bytes.Equal(d.body, body) {
			res.late[i] = d.end.Sub(stored)
		}
	}
	return res, nil
}

// inProgressServer is an idempotency middleware that does not implement
// idem's protocol, as npm's express-idempotency behaves: the first request
// with an Idempotency-Key runs the handler (handler long) and stores its
// response; a request with the key while it runs is answered a bare 409 (no
// Retry-After, no problem type); one after it gets the stored response.
type inProgressServer struct {
	handler time.Duration
	// hold, if set, replaces the handler's time: it runs until hold is
	// closed (for tests, which must not depend on timings).
	hold    chan struct{}
	closing chan struct{}
	once    sync.Once

	mu      sync.Mutex
	entries map[string]*inProgressEntry
	n       int // responses made
}

// inProgressEntry is one key's state: claimed is closed when a request took
// the key; body and storedAt are set when its handler finished.
type inProgressEntry struct {
	claimed  chan struct{}
	taken    bool
	body     []byte // nil while the handler runs
	storedAt time.Time
}

// inProgressBody is the bare 409's body.
var inProgressBody = []byte(`{"error":"a request with this Idempotency-Key is being processed"}` + "\n")

func newInProgressServer(handler time.Duration) *inProgressServer {
	return &inProgressServer{handler: handler, closing: make(chan struct{}), entries: map[string]*inProgressEntry{}}
}

// entry returns key's entry, made on first use. The caller holds s.mu.
func (s *inProgressServer) entry(key string) *inProgressEntry {
	e := s.entries[key]
	if e == nil {
		e = &inProgressEntry{claimed: make(chan struct{})}
		s.entries[key] = e
	}
	return e
}

// claimed returns a channel closed once a request has taken key.
func (s *inProgressServer) claimed(key string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entry(key).claimed
}

// stored returns when key's response was stored, and its body.
func (s *inProgressServer) stored(key string) (time.Time, []byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil || e.body == nil {
		return time.Time{}, nil, false
	}
	return e.storedAt, e.body, true
}

// Close ends the handlers still running (their requests get a 503).
func (s *inProgressServer) Close() { s.once.Do(func() { close(s.closing) }) }

func (s *inProgressServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	var e *inProgressEntry
	if key != "" {
		e = s.entry(key)
		switch {
		case e.body != nil: // done: the stored response
			body := e.body
			s.mu.Unlock()
			w.Header().Set("X-Cache", "HIT")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
			return
		case e.taken: // in flight: a bare 409
			s.mu.Unlock()
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write(inProgressBody)
			return
		}
		e.taken = true
		close(e.claimed)
	}
	s.n++
	body := []byte(fmt.Sprintf(`{"id":"ord_%d","status":"created"}`+"\n", s.n))
	s.mu.Unlock()

	// The handler runs to its end whether or not the client is still there,
	// as a Node handler does; only the server's Close cuts it.
	t := time.NewTimer(s.handler)
	defer t.Stop()
	finished := t.C
	if s.hold != nil {
		t.Stop()
		finished = nil
	}
	select {
	case <-finished:
	case <-s.hold:
	case <-s.closing:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if e != nil {
		s.mu.Lock()
		e.body, e.storedAt = body, time.Now()
		s.mu.Unlock()
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// outageServer is a server that can be taken down and brought back.
type outageServer interface {
	URL() string
	// down starts the outage, up ends it.
	down()
	up() error
	Close()
}

// createdBody is what a healthy outage server answers.
var createdBody = []byte(`{"id":"usr_1","status":"created"}` + "\n")

// unavailableServer answers 503 (no Retry-After) while it is down, and 201
// otherwise.
type unavailableServer struct {
	srv    *httptest.Server
	isDown atomic.Bool
}

func newUnavailableServer() *unavailableServer {
	s := &unavailableServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if s.isDown.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"service unavailable"}` + "\n"))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(createdBody)
	}))
	return s
}

func (s *unavailableServer) URL() string { return s.srv.URL }
func (s *unavailableServer) down()       { s.isDown.Store(true) }
func (s *unavailableServer) up() error   { s.isDown.Store(false); return nil }
func (s *unavailableServer) Close()      { s.srv.Close() }

// The ports of the servers that refuse connections while down: the bench's
// own range, outside the ephemeral ports that outgoing connections take, so
// that the port is still free when the server listens again.
const (
	refusingPortFirst = 17500
	refusingPortLast  = 17599
)

// reservedPorts holds the ports of this process's refusing servers, down or
// up, so that no other takes one during its outage.
var reservedPorts struct {
	sync.Mutex
	taken map[int]bool
}

// refusingServer serves 201 while it is up; while it is down nothing listens
// on its port, so every connection is refused.
type refusingServer struct {
	port int

	mu     sync.Mutex
	srv    *http.Server
	served chan struct{} // closed when srv's Serve returns
}

func (s *refusingServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// newRefusingServer starts a refusingServer, up, on a free port of the range.
func newRefusingServer() (*refusingServer, error) {
	reservedPorts.Lock()
	defer reservedPorts.Unlock()
	if reservedPorts.taken == nil {
		reservedPorts.taken = map[int]bool{}
	}
	for p := refusingPortFirst; p <= refusingPortLast; p++ {
		if reservedPorts.taken[p] {
			continue
		}
		s := &refusingServer{port: p}
		if err := s.listen(); err != nil {
			continue // another process has it
		}
		reservedPorts.taken[p] = true
		return s, nil
	}
	return nil, fmt.Errorf("no free port on 127.0.0.1 from %d to %d", refusingPortFirst, refusingPortLast)
}

// listen starts serving on s's port. The caller holds s.mu or owns s alone.
func (s *refusingServer) listen() error {
	l, err := net.Listen("tcp", s.addr())
	if err != nil {
		return err
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(createdBody)
		}),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	s.srv, s.served = srv, served
	return nil
}

func (s *refusingServer) URL() string { return "http://" + s.addr() }

// down closes the listener and every connection.
func (s *refusingServer) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	_ = s.srv.Close()
	<-s.served // Serve returns as soon as its listener is closed
	s.srv = nil
}

// up listens again on the same port.
func (s *refusingServer) up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	if err := s.listen(); err != nil {
		return fmt.Errorf("listening again on %s after the outage: %w", s.addr(), err)
	}
	return nil
}

// Close stops the server and frees its port.
func (s *refusingServer) Close() {
	s.down()
	reservedPorts.Lock()
	delete(reservedPorts.taken, s.port)
	reservedPorts.Unlock()
}

// newOutageServer returns sc's server, up.
func newOutageServer(kind ForeignKind) (outageServer, error) {
	if kind == ForeignRefused {
		return newRefusingServer()
	}
	return newUnavailableServer(), nil
}

// runOutage takes sc's server down, starts n operations at once, and brings
// the server back sc.Outage later.
func runOutage(ctx context.Context, client *http.Client, sc ForeignScenario, n int) ([]foreignOp, error) {
	srv, err := newOutageServer(sc.Kind)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	srv.down()
	upErr := make(chan error, 1)
	timer := time.AfterFunc(sc.Outage, func() { upErr <- srv.up() })
	ops := runAtOnce(n, func(int) foreignOp { return sendForeign(ctx, client, srv.URL()+"/users", "") })
	if timer.Stop() {
		return ops, nil // every operation ended within the outage
	}
	select {
	case err := <-upErr:
		return ops, err
	case <-time.After(10 * time.Second):
		return nil, errors.New("the server did not come back 10 s after the outage's end")
	}
}

// runSustained takes sc's server down for good and starts sc.Rate operations
// per second for sc.Duration, each at its time whether or not the earlier
// ones ended.
func runSustained(ctx context.Context, client *http.Client, sc ForeignScenario) ([]foreignOp, error) {
	srv := newUnavailableServer()
	defer srv.Close()
	srv.down()
	n := sc.streamOps()
	ops := make([]foreignOp, n)
	interval := time.Duration(float64(time.Second) / float64(sc.Rate))
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wg.Go(func() { ops[i] = sendForeign(ctx, client, srv.URL()+"/users", "") })
	}
	wg.Wait()
	return ops, nil
}
