package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// StormConfig sets up section 4: a steady, open-loop stream of logical calls to a
// dependency that fails every request (503, no Retry-After) for Outage, between
// a healthy Warmup and a healthy Recovery, in real time. Backoff and time caps
// are scaled down from idem's defaults so that the storm fits in seconds.
type StormConfig struct {
	// Rate is the number of logical calls started per second.
	Rate int
	// Warmup, Outage and Recovery are the three phases, in order.
	Warmup, Outage, Recovery time.Duration
	// Bucket is the width of one time bucket of the load chart.
	Bucket time.Duration
	// MaxAttempts, Base, Max, MaxElapsed and AttemptTimeout configure the
	// idem Transport (WithMaxAttempts, WithBackoff, WithMaxElapsed,
	// WithAttemptTimeout).
	MaxAttempts    int
	Base, Max      time.Duration
	MaxElapsed     time.Duration
	AttemptTimeout time.Duration
	// BudgetRatio and BudgetMinPerSecond configure the Budget of the second
	// run (idem.NewBudget); BudgetLabel is how the report describes it.
	BudgetRatio        float64
	BudgetMinPerSecond int
	BudgetLabel        string
}

// DefaultStorm returns the full run's storm: 200 calls/s, a 2 s outage between
// 1 s of warm-up and 1 s of recovery, idem's backoff scaled by 1/30 (10 ms base,
// 333 ms cap, 1 s total), five attempts, and a Budget with its defaults.
func DefaultStorm() StormConfig {
	return StormConfig{
		Rate:               200,
		Warmup:             time.Second,
		Outage:             2 * time.Second,
		Recovery:           time.Second,
		Bucket:             100 * time.Millisecond,
		MaxAttempts:        5,                                               // idem's default
		Base:               300 * time.Millisecond / 30,                     // idem's default base / 30
		Max:                (10 * time.Second / 30).Round(time.Millisecond), // idem's default max / 30
		MaxElapsed:         30 * time.Second / 30,                           // idem's default cap / 30
		AttemptTimeout:     time.Second,
		BudgetRatio:        0.1,
		BudgetMinPerSecond: 10,
		BudgetLabel:        "idem.NewBudget(0.1, 10) (ratio 0.1, 10 retries/s reserve, 10 s window)",
	}
}

// StormRun is the outcome of one storm, with or without the budget.
type StormRun struct {
	Name string
	// Calls is the number of logical calls made; OutageCalls of them started
	// during the outage.
	Calls, OutageCalls int
	// Attempts counts every attempt sent; OutageAttempts those of the calls
	// started during the outage.
	Attempts, OutageAttempts int
	// Failed counts logical calls that ended without a 2xx.
	Failed int
	// PeakLoad is the largest number of attempts the server received in one
	// bucket, divided by the logical calls started in that bucket.
	PeakLoad float64
	// Load is the number of attempts the server received per second, by bucket.
	Load []float64
	// RetriesDenied is what the budget refused (0 without a budget).
	RetriesDenied uint64
}

// AttemptsPerCall returns Attempts/Calls.
func (r StormRun) AttemptsPerCall() float64 { return ratio(r.Attempts, r.Calls) }

// OutageAttemptsPerCall returns OutageAttempts/OutageCalls.
func (r StormRun) OutageAttemptsPerCall() float64 { return ratio(r.OutageAttempts, r.OutageCalls) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// StormResult holds both runs and the offered load, bucket by bucket.
type StormResult struct {
	Config   StormConfig
	Offered  []float64 // logical calls started per second, by bucket
	NoBudget StormRun
	Budget   StormRun
}

// RunStorm runs the storm twice, without and then with a retry budget.
func RunStorm(ctx context.Context, cfg StormConfig) (StormResult, error) {
	if cfg.Rate <= 0 || cfg.Outage <= 0 || cfg.Bucket <= 0 || cfg.MaxAttempts < 1 {
		return StormResult{}, fmt.Errorf("bench: RunStorm: Rate, Outage, Bucket and MaxAttempts must be positive")
	}
	res := StormResult{Config: cfg}
	var err error
	if res.NoBudget, res.Offered, err = runStorm(ctx, cfg, nil); err != nil {
		return res, err
	}
	res.NoBudget.Name = "no budget"
	if res.Budget, _, err = runStorm(ctx, cfg, idem.NewBudget(cfg.BudgetRatio, cfg.BudgetMinPerSecond)); err != nil {
		return res, err
	}
	res.Budget.Name = "retry budget"
	return res, nil
}

// attemptCounter is the per-call attempt count that countingTransport finds in
// the request's context.
type attemptCounter struct{}

// countingTransport counts each attempt in the *atomic.Int64 of the request's
// context, if any, and passes it on.
type countingTransport struct{ next http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if n, ok := req.Context().Value(attemptCounter{}).(*atomic.Int64); ok {
		n.Add(1)
	}
	return t.next.RoundTrip(req)
}

// withAttemptCounter returns ctx carrying n for countingTransport.
func withAttemptCounter(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, attemptCounter{}, n)
}

// stormServer fails every request between outageStart and outageEnd and counts
// the attempts it receives in time buckets from start.
type stormServer struct {
	start                  time.Time
	outageStart, outageEnd time.Duration
	bucket                 time.Duration
	received               []atomic.Int64
}

func (s *stormServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	since := time.Since(s.start)
	if i := int(since / s.bucket); i >= 0 && i < len(s.received) {
		s.received[i].Add(1)
	}
	if since >= s.outageStart && since < s.outageEnd {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// runStorm runs one storm and returns its outcome and the offered load.
func runStorm(ctx context.Context, cfg StormConfig, budget *idem.Budget) (StormRun, []float64, error) {
	total := cfg.Warmup + cfg.Outage + cfg.Recovery
	// Room for the retries of the last calls, which may end after total.
	buckets := int((total+cfg.MaxElapsed+cfg.AttemptTimeout)/cfg.Bucket) + 1
	srv := &stormServer{
		outageStart: cfg.Warmup,
		outageEnd:   cfg.Warmup + cfg.Outage,
		bucket:      cfg.Bucket,
		received:    make([]atomic.Int64, buckets),
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	base := newBaseTransport()
	defer base.CloseIdleConnections()
	opts := []idem.Option{
		idem.WithMaxAttempts(cfg.MaxAttempts),
		idem.WithBackoff(cfg.Base, cfg.Max),
		idem.WithMaxElapsed(cfg.MaxElapsed),
		idem.WithAttemptTimeout(cfg.AttemptTimeout),
	}
	if budget != nil {
		opts = append(opts, idem.WithRetryBudget(budget))
	}
	client := &http.Client{Transport: idem.NewTransport(countingTransport{base}, opts...)}

	n := int(total.Seconds() * float64(cfg.Rate))
	interval := time.Second / time.Duration(cfg.Rate)
	type call struct {
		startedAt time.Duration
		attempts  atomic.Int64
		ok        bool
	}
	calls := make([]call, n)
	var wg sync.WaitGroup
	srv.start = time.Now()
	for i := range calls {
		at := time.Duration(i) * interval
		if d := time.Until(srv.start.Add(at)); d > 0 {
			time.Sleep(d) // the open-loop load generator's pacing
		}
		if ctx.Err() != nil {
			break
		}
		c := &calls[i]
		c.startedAt = time.Since(srv.start)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(withAttemptCounter(ctx, &c.attempts), http.MethodGet, ts.URL, nil)
			if err != nil {
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			c.ok = resp.StatusCode < 300
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return StormRun{}, nil, err
	}

	run := StormRun{Calls: n, Load: make([]float64, buckets)}
	offered := make([]float64, buckets)
	startedIn := make([]int, buckets)
	perSecond := float64(time.Second) / float64(cfg.Bucket)
	for i := range calls {
		c := &calls[i]
		a := int(c.attempts.Load())
		run.Attempts += a
		if !c.ok {
			run.Failed++
		}
		if c.startedAt >= srv.outageStart && c.startedAt < srv.outageEnd {
			run.OutageCalls++
			run.OutageAttempts += a
		}
		if b := int(c.startedAt / cfg.Bucket); b < buckets {
			startedIn[b]++
			offered[b] += perSecond
		}
	}
	for i := range srv.received {
		got := srv.received[i].Load()
		run.Load[i] = float64(got) * perSecond
		if startedIn[i] > 0 {
			run.PeakLoad = max(run.PeakLoad, float64(got)/float64(startedIn[i]))
		}
	}
	run.RetriesDenied = budget.Stats().RetriesDenied
	return run, offered, nil
}
