package check_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem-check/check"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/idemtest"
	"github.com/idemkit/idem/server/memstore"
)

// fakeClock is the memory store's clock; the check's expiry wait moves it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration // moved by Sleep
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.slept += d
	c.mu.Unlock()
	return nil
}

// RunNow is the check's clock (Config.Now): real time plus the time Sleep
// skipped, so that the report's Duration is what the run would take with
// real waits.
func (c *fakeClock) RunNow() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.slept)
}

// countingRT counts the requests that leave through it.
type countingRT struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}

// counted is a full-plan run's Config with its requests and effect counts
// counted where they leave for the server: the run's own tally must match.
type counted struct {
	cfg             check.Config
	requests, reads *countingRT
}

func countedConfig(cfg check.Config) *counted {
	c := &counted{cfg: cfg, requests: &countingRT{next: http.DefaultTransport.(*http.Transport).Clone()},
		reads: &countingRT{next: http.DefaultTransport}}
	c.cfg.Transport = c.requests
	if e, ok := cfg.Effect.(*check.EffectURL); ok {
		ec := *e
		ec.Transport = c.reads
		c.cfg.Effect = &ec
	}
	return c
}

// idemServerConfig is the Config of every row for the demo payments API at
// base (idem-server's routes), with Chaos-* headers for slow and failing
// handlers, one customer per operation (the body template's {{id}}) so that
// the effect count is the operation's own, and a lease row whose handler
// outlasts lease (the server's -lock-ttl).
func idemServerConfig(base string, ttl, lease time.Duration) check.Config {
	return check.Config{
		URL:            base + "/payments",
		Body:           []byte(`{"customer":"cus_{{id}}","amount":1999,"currency":"EUR"}`),
		Header:         http.Header{"Authorization": {"Bearer alice"}, "Content-Type": {"application/json"}},
		OtherPrincipal: http.Header{"Authorization": {"Bearer bob"}},
		// Longer than Prefer: wait=1 plus its tolerance, so that the
		// prefer-wait row can tell a wait honoured from one ignored.
		Slow:      http.Header{"Chaos-Delay": {"2s"}},
		LeaseSlow: http.Header{"Chaos-Delay": {(3 * lease).String()}},
		Lease:     lease,
		Fail:      http.Header{"Chaos-Fail": {"500"}},
		TTL:       ttl,
		TTLMargin: time.Second,
		// Half the TTL: still kept.
		ReplayAfter: ttl / 2,
		Effect: &check.EffectURL{URL: base + "/payments?customer=cus_{{id}}", Path: "count",
			Header: http.Header{"Authorization": {"Bearer alice"}}},
		Chaos:  true,
		Strict: true,
	}
}

// idem's own middleware, in-process over the memory store, passes every row.
func TestIdemServerInProcessPassesEveryRow(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(2e9, 0)}
	const ttl = 10 * time.Minute
	srv := idemtest.NewServer(
		idemtest.WithStore(memstore.New(memstore.WithClock(clock.Now))),
		idemtest.WithMiddlewareOptions(server.WithTTL(ttl)),
	)
	defer srv.Close()
	c := countedConfig(idemServerConfig(srv.URL, ttl, time.Second))
	c.cfg.Lease = 0 // idemtest's lease is the default 30s: the row runs, but cannot tell
	c.cfg.Sleep, c.cfg.Now = clock.Sleep, clock.RunNow
	rep := run(t, c.cfg)
	wantEveryRowPasses(t, rep)
	wantWithinBound(t, c, rep)
}

// boundSlack is how far past its announced Time a run may end: what a
// scenario the bound cut short takes to see its context end and return (a
// request cancelled, a proxy closed). Generous: a loaded machine.
const boundSlack = 5 * time.Second

// wantWithinBound wants a run to have kept to the bound PlanBound announced
// before it: no more requests left for the server (c counts them where they
// leave) and no more effect counts were taken than it said, the run took no
// longer (its waits included), and no scenario took more than its share.
func wantWithinBound(t *testing.T, c *counted, rep *check.Report) {
	t.Helper()
	b, err := check.PlanBound(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	sent, reads := int(c.requests.n.Load()), int(c.reads.n.Load())
	if rep.Budget != b.Requests || rep.ReadBudget != b.Reads || rep.TimeBound != b.Time {
		t.Errorf("the report's bound (%d requests, %d counts, %s) is not the announced %+v", rep.Budget, rep.ReadBudget, rep.TimeBound, b)
	}
	if sent > b.Requests || rep.Sent != sent {
		t.Errorf("%d requests left for the server, the report says %d sent, %d announced", sent, rep.Sent, b.Requests)
	}
	if reads > b.Reads || rep.Reads != reads {
		t.Errorf("%d effect counts taken, the report says %d, %d announced", reads, rep.Reads, b.Reads)
	}
	if rep.Duration > b.Time+boundSlack {
		t.Errorf("the run took %s (its waits included), %s announced", rep.Duration, b.Time)
	}
	for _, o := range check.Overshoots(rep) {
		t.Errorf("past its share of the bound: %s", o)
	}
}

// idemServerRows is how many rows a run of idemServerConfig has: the demo's
// body has three fields.
const idemServerRows = 32

func run(t *testing.T, cfg check.Config) *check.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := check.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func wantEveryRowPasses(t *testing.T, rep *check.Report) {
	t.Helper()
	if len(rep.Rows) != idemServerRows {
		t.Errorf("%d rows, want %d", len(rep.Rows), idemServerRows)
	}
	if rep.Failed() {
		t.Error("a strict run failed")
	}
	for _, row := range rep.Rows {
		if row.Verdict != check.Pass {
			t.Errorf("%s: %s: %s", row.ID, row.Verdict, row.Got)
		}
	}
	if t.Failed() {
		var b strings.Builder
		_ = rep.WriteText(&b, true)
		t.Logf("report:\n%s", b.String())
	}
}
