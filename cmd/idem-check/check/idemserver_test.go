package check_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem-check/check"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/idemtest"
	"github.com/idemkit/idem/server/memstore"
)

// fakeClock is the memory store's clock; the check's expiry wait moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return nil
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
	cfg := idemServerConfig(srv.URL, ttl, time.Second)
	cfg.Lease = 0 // idemtest's lease is the default 30s: the row runs, but cannot tell
	cfg.Sleep = clock.Sleep
	rep := run(t, cfg)
	wantEveryRowPasses(t, rep)
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
