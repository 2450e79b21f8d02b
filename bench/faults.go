package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/idemtest"
)

// Routes of the companion server that section 2 drives.
const (
	// RouteKeyed is protected by idem's server middleware: a request needs an
	// Idempotency-Key, and a repeated key replays the first response.
	RouteKeyed = "/payments"
	// RouteUnprotected is the same handler without the middleware, what a
	// server without idem offers: every request that arrives is a payment.
	RouteUnprotected = "/payments/unprotected"
)

// FaultScenario is one kind of fault section 2 injects, at random, into every
// attempt that reaches the companion server.
type FaultScenario struct {
	Name string
	// DropRate is the fraction of attempts whose response is lost after the
	// payment was made and recorded (the connection is cut).
	DropRate float64
	// DelayMax delays every attempt's business write by U[0, DelayMax); with
	// an attempt time-out below DelayMax, the slowest attempts time out. The
	// server abandons the write of an attempt whose client hung up.
	DelayMax time.Duration
	// AfterWriteDelayMin and AfterWriteDelayMax delay the response of a
	// fraction AfterWriteRate of the attempts by U[AfterWriteDelayMin,
	// AfterWriteDelayMax) after the business write (Chaos-Delay-After-Write):
	// an attempt that times out has been charged all the same. No attempt is
	// delayed when AfterWriteDelayMax is zero.
	AfterWriteDelayMin, AfterWriteDelayMax time.Duration
	AfterWriteRate                         float64
}

// validate reports a setting of sc that the run could not honour.
func (sc FaultScenario) validate() error {
	switch {
	case sc.AfterWriteDelayMax < 0 || sc.AfterWriteDelayMax > chaos.MaxDelay:
		return fmt.Errorf("AfterWriteDelayMax %v: want from 0 to %v", sc.AfterWriteDelayMax, chaos.MaxDelay)
	case sc.AfterWriteDelayMax == 0 && (sc.AfterWriteDelayMin != 0 || sc.AfterWriteRate != 0):
		return errors.New("AfterWriteDelayMin and AfterWriteRate need AfterWriteDelayMax")
	case sc.AfterWriteDelayMin < 0 || sc.AfterWriteDelayMin > sc.AfterWriteDelayMax:
		return fmt.Errorf("AfterWriteDelayMin %v: want from 0 to AfterWriteDelayMax (%v)", sc.AfterWriteDelayMin, sc.AfterWriteDelayMax)
	case sc.AfterWriteDelayMax > 0 && !(sc.AfterWriteRate > 0 && sc.AfterWriteRate <= 1):
		return fmt.Errorf("AfterWriteRate %v: want more than 0, at most 1", sc.AfterWriteRate)
	}
	return nil
}

// FaultConfig sets up section 2.
type FaultConfig struct {
	// Ops is the number of logical payments each client makes per scenario.
	Ops int
	// Concurrency is the number of payments each client has in flight.
	Concurrency int
	// AttemptTimeout bounds every attempt of every client.
	AttemptTimeout time.Duration
	Scenarios      []FaultScenario
	// Seed seeds the fault injection.
	Seed uint64
}

// DefaultFaults returns the full run's section 2: 200 payments per client and
// scenario, 20 in flight, a 300 ms attempt time-out; 20% of responses lost,
// writes delayed by up to 400 ms, or responses delayed by up to 400 ms after
// the write (in both time-out scenarios a quarter of the attempts time out),
// or a quarter of the responses delayed by 1 to 3 s after the write: longer
// than the attempt time-out, much shorter than the clients' caps, so a
// retry arrives while the first attempt still runs.
func DefaultFaults() FaultConfig {
	return FaultConfig{
		Ops:            200,
		Concurrency:    20,
		AttemptTimeout: 300 * time.Millisecond,
		Scenarios: []FaultScenario{
			{Name: "lost responses (20% of attempts dropped after the write)", DropRate: 0.2},
			{Name: "time-outs before the write (write delayed U[0, 400ms), 300ms attempt time-out)", DelayMax: 400 * time.Millisecond},
			{Name: "time-outs after the write (response delayed U[0, 400ms) after the write, 300ms attempt time-out)",
				AfterWriteDelayMax: 400 * time.Millisecond, AfterWriteRate: 1},
			{Name: "late answers (25% of responses delayed U[1s, 3s) after the write, 300ms attempt time-out)",
				AfterWriteDelayMin: time.Second, AfterWriteDelayMax: 3 * time.Second, AfterWriteRate: 0.25},
		},
		Seed: 1,
	}
}

// FaultClient is one client setup of section 2: a retry layer, the route it
// posts to, and whether the caller sets an Idempotency-Key itself.
type FaultClient struct {
	Name  string
	Route string
	// CallerKey makes the caller put an Idempotency-Key of its own on each
	// payment (the same on every attempt the retry layer makes).
	CallerKey bool
	// Key says in the report which key, if any, reaches the server.
	Key string
	// pay makes one logical payment of body to url, sending every attempt
	// through next, and reports whether it ended in a 201.
	pay func(ctx context.Context, next http.RoundTripper, timeout time.Duration, req func(context.Context) (*http.Request, error)) (bool, error)
}

// FaultClients returns the six rows of section 2. The peers send no key of
// their own: against a server without idem (RouteUnprotected) they are what
// most callers run. Each is also shown with a caller-set key on RouteKeyed,
// which is the fair comparison for idem's client there, and idem's client is
// shown against the unprotected route too, where its key is ignored: exactly
// once needs both halves.
func FaultClients() []FaultClient {
	return []FaultClient{
		{Name: "go-retryablehttp (defaults)", Route: RouteUnprotected, Key: "none", pay: payRetryableHTTP},
		{Name: "backoff/v4 Retry + http.Client", Route: RouteUnprotected, Key: "none", pay: payBackoff},
		{Name: "idem", Route: RouteUnprotected, Key: "generated, ignored by the route", pay: payIdem},
		{Name: "go-retryablehttp (defaults)", Route: RouteKeyed, CallerKey: true, Key: "set by the caller", pay: payRetryableHTTP},
		{Name: "backoff/v4 Retry + http.Client", Route: RouteKeyed, CallerKey: true, Key: "set by the caller", pay: payBackoff},
		{Name: "idem", Route: RouteKeyed, Key: "generated by idem", pay: payIdem},
	}
}

// FaultResult is one row of section 2.
type FaultResult struct {
	Scenario string
	Client   FaultClient
	Ops      int
	// Payments is how many payments the ledger holds for these Ops.
	Payments int
	// Duplicates counts payments beyond the first of an operation.
	Duplicates int
	// Uncharged counts operations that made no payment at all.
	Uncharged int
	// Errors counts operations whose caller got an error or a non-201 answer;
	// ChargedErrors those of them that were charged all the same (the caller
	// cannot tell, and a retry of its own without a key charges again).
	Errors, ChargedErrors int
	// ErrorTexts counts the errors returned, by text (an answer other than a
	// 201 reads "bench: status N").
	ErrorTexts map[string]int
	// Attempts counts every attempt sent.
	Attempts int
	// AnswerP50 and AnswerP99 are percentiles of the time from an operation's
	// start to its caller's final answer, whatever that answer is.
	AnswerP50, AnswerP99 time.Duration
	// OutcomeP50 and OutcomeP99 are percentiles of the time from an
	// operation's start until its caller knows the outcome: its final answer
	// when that is the 201, Never when it is an error (the caller is not told
	// whether it was charged).
	OutcomeP50, OutcomeP99 time.Duration
	// Elapsed is the wall time of the row.
	Elapsed time.Duration
}

// Never is the time to outcome of an operation that ended in an error: its
// caller never learns whether it was charged.
const Never = time.Duration(math.MaxInt64)

// timesToOutcome returns the p50 and p99 of answer, the time each operation
// took to its final answer, and of the time to its outcome, Never for the
// operations that failed.
func timesToOutcome(answer []time.Duration, failed []bool) (a50, a99, o50, o99 time.Duration) {
	if len(answer) == 0 {
		return 0, 0, 0, 0
	}
	a := slices.Sorted(slices.Values(answer))
	o := make([]time.Duration, len(answer))
	for i, d := range answer {
		o[i] = d
		if failed[i] {
			o[i] = Never
		}
	}
	slices.Sort(o)
	return percentile(a, 0.50), percentile(a, 0.99), percentile(o, 0.50), percentile(o, 0.99)
}

// AttemptsPerOp returns Attempts/Ops.
func (r FaultResult) AttemptsPerOp() float64 { return ratio(r.Attempts, r.Ops) }

// RunFaults runs every client against its own companion server for every
// scenario; the rows of one scenario run concurrently.
func RunFaults(ctx context.Context, cfg FaultConfig, clients []FaultClient) ([]FaultResult, error) {
	if cfg.Ops <= 0 || cfg.Concurrency <= 0 || cfg.AttemptTimeout <= 0 {
		return nil, fmt.Errorf("bench: RunFaults: Ops, Concurrency and AttemptTimeout must be positive")
	}
	for _, sc := range cfg.Scenarios {
		if err := sc.validate(); err != nil {
			return nil, fmt.Errorf("bench: RunFaults: scenario %q: %w", sc.Name, err)
		}
	}
	var out []FaultResult
	for si, sc := range cfg.Scenarios {
		rows := make([]FaultResult, len(clients))
		errs := make([]error, len(clients))
		var wg sync.WaitGroup
		for ci, c := range clients {
			wg.Go(func() {
				seed := cfg.Seed ^ uint64(si)<<32 ^ uint64(ci)
				rows[ci], errs[ci] = runFaultRow(ctx, cfg, sc, c, seed)
			})
		}
		wg.Wait()
		for ci, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("bench: faults %q, %s on %s: %w", sc.Name, clients[ci].Name, clients[ci].Route, err)
			}
		}
		out = append(out, rows...)
	}
	return out, nil
}

// lockedRand is a seeded source of faults, safe for concurrent use.
type lockedRand struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (r *lockedRand) Float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Float64()
}

// runFaultRow makes cfg.Ops payments with client c against a fresh companion
// server injecting sc, and counts what the ledger holds.
func runFaultRow(ctx context.Context, cfg FaultConfig, sc FaultScenario, c FaultClient, seed uint64) (FaultResult, error) {
	rnd := &lockedRand{rng: rand.New(rand.NewPCG(seed, 0x1de4))}
	srv, err := newFaultServer(sc, rnd.Float64)
	if err != nil {
		return FaultResult{}, err
	}
	defer srv.Close()
	base := newBaseTransport()
	defer base.CloseIdleConnections()
	var next http.RoundTripper = countingTransport{base}
	if sc.AfterWriteDelayMax > 0 {
		next = afterWriteDelayTransport{next: next, min: sc.AfterWriteDelayMin, max: sc.AfterWriteDelayMax,
			rate: sc.AfterWriteRate, rand: rnd.Float64}
	}

	res := FaultResult{Scenario: sc.Name, Client: c, Ops: cfg.Ops}
	var attempts atomic.Int64
	customers := make([]string, cfg.Ops)
	failed := make([]bool, cfg.Ops)
	errTexts := make([]string, cfg.Ops)
	took := make([]time.Duration, cfg.Ops)
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Ops {
		customers[i] = "cus_" + strconv.Itoa(i)
		key := "caller-key-" + strconv.Itoa(i)
		body := []byte(fmt.Sprintf(`{"customer":%q,"amount":1999,"currency":"EUR"}`, customers[i]))
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return FaultResult{}, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			var n atomic.Int64
			opCtx := withAttemptCounter(ctx, &n)
			newReq := func(ctx context.Context) (*http.Request, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+c.Route, bytes.NewReader(body))
				if err != nil {
					return nil, err
				}
				req.Header.Set("Content-Type", "application/json")
				if c.CallerKey {
					req.Header.Set("Idempotency-Key", key)
				}
				return req, nil
			}
			opStart := time.Now()
			ok, err := c.pay(opCtx, next, cfg.AttemptTimeout, newReq)
			took[i] = time.Since(opStart)
			failed[i] = !ok
			if !ok {
				errTexts[i] = "an answer other than 201"
				if err != nil {
					errTexts[i] = err.Error()
				}
			}
			attempts.Add(n.Load())
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return FaultResult{}, err
	}
	res.Attempts = int(attempts.Load())
	res.AnswerP50, res.AnswerP99, res.OutcomeP50, res.OutcomeP99 = timesToOutcome(took, failed)
	for i, cus := range customers {
		n := srv.Payments(cus)
		if failed[i] {
			res.Errors++
			if res.ErrorTexts == nil {
				res.ErrorTexts = map[string]int{}
			}
			res.ErrorTexts[errTexts[i]]++
			if n > 0 {
				res.ChargedErrors++
			}
		}
		res.Payments += n
		if n == 0 {
			res.Uncharged++
		}
		if n > 1 {
			res.Duplicates += n - 1
		}
	}
	return res, nil
}

// doOnce sends req through client and returns the answer with its body read
// and closed.
func doOnce(client *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp, nil
}

// payIdem makes the payment through idem's Transport with its defaults and the
// attempt time-out.
func payIdem(ctx context.Context, next http.RoundTripper, timeout time.Duration, newReq func(context.Context) (*http.Request, error)) (bool, error) {
	client := &http.Client{Transport: idem.NewTransport(next, idem.WithAttemptTimeout(timeout))}
	req, err := newReq(ctx)
	if err != nil {
		return false, err
	}
	resp, err := doOnce(client, req)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusCreated {
		return false, &errStatus{resp.StatusCode}
	}
	return true, nil
}

// payRetryableHTTP makes the payment through go-retryablehttp's default client
// (logging off), its http.Client bounded by the attempt time-out.
func payRetryableHTTP(ctx context.Context, next http.RoundTripper, timeout time.Duration, newReq func(context.Context) (*http.Request, error)) (bool, error) {
	rc := newRetryableHTTP(next)
	rc.HTTPClient.Timeout = timeout
	req, err := newReq(ctx)
	if err != nil {
		return false, err
	}
	resp, err := doOnce(rc.StandardClient(), req)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusCreated {
		return false, &errStatus{resp.StatusCode}
	}
	return true, nil
}

// errStatus is the error a client returns for an answer other than 201 (other
// than 2xx for payBackoff).
type errStatus struct{ status int }

func (e *errStatus) Error() string { return "bench: status " + strconv.Itoa(e.status) }

// payBackoff makes the payment the way a caller of cenkalti/backoff/v4 writes
// it: Retry around a plain http.Client with the attempt time-out, the default
// exponential backoff (500 ms, x1.5, ±50%) limited to four retries, retrying
// network errors, 408, 429 and 5xx, and giving up at once on other answers.
func payBackoff(ctx context.Context, next http.RoundTripper, timeout time.Duration, newReq func(context.Context) (*http.Request, error)) (bool, error) {
	client := &http.Client{Transport: next, Timeout: timeout}
	var status int
	op := func() error {
		req, err := newReq(ctx)
		if err != nil {
			return backoff.Permanent(err)
		}
		resp, err := doOnce(client, req)
		if err != nil {
			return err
		}
		status = resp.StatusCode
		switch {
		case status < 300:
			return nil
		case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
			return &errStatus{status}
		}
		return backoff.Permanent(&errStatus{status})
	}
	b := backoff.WithContext(backoff.WithMaxRetries(backoff.NewExponentialBackOff(), 4), ctx)
	err := backoff.Retry(op, b)
	return err == nil && status == http.StatusCreated, err
}

// afterWriteDelayTransport asks the server, on a fraction rate of the
// attempts, to answer U[min, max) after the business write
// (Chaos-Delay-After-Write). It sits under the retry layer, so that each
// attempt draws its own delay: package chaos has no random rate for this
// fault, only the header.
type afterWriteDelayTransport struct {
	next     http.RoundTripper
	min, max time.Duration
	rate     float64 // 1: every attempt
	rand     func() float64
}

func (t afterWriteDelayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.rate < 1 && t.rand() >= t.rate {
		return t.next.RoundTrip(req)
	}
	d := t.min + time.Duration(t.rand()*float64(t.max-t.min))
	req = req.Clone(req.Context()) // a RoundTripper must not modify its request
	req.Header.Set(chaos.HeaderDelayAfterWrite, d.String())
	return t.next.RoundTrip(req)
}

// newFaultServer starts the companion server (server/idemtest, memory store)
// injecting sc's faults into every attempt, drawn from rnd.
func newFaultServer(sc FaultScenario, rnd func() float64) (srv *idemtest.Server, err error) {
	defer func() {
		if r := recover(); r != nil { // idemtest panics on an invalid option
			err = fmt.Errorf("starting the companion server: %v", r)
		}
	}()
	return idemtest.NewServer(idemtest.WithChaos(
		chaos.WithRand(rnd),
		chaos.WithDropRate(sc.DropRate),
		chaos.WithDelayMax(sc.DelayMax),
	)), nil
}
