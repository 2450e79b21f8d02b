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
// handlers.
func idemServerConfig(base string, ttl time.Duration) check.Config {
	customer := "cus_check"
	return check.Config{
		URL:            base + "/payments",
		Body:           []byte(`{"customer":"` + customer + `","amount":1999,"currency":"EUR"}`),
		Header:         http.Header{"Authorization": {"Bearer alice"}, "Content-Type": {"application/json"}},
		OtherPrincipal: http.Header{"Authorization": {"Bearer bob"}},
		Slow:           http.Header{"Chaos-Delay": {"1s"}},
		Fail:           http.Header{"Chaos-Fail": {"500"}},
		TTL:            ttl,
		TTLMargin:      time.Second,
		Effect: &check.EffectURL{URL: base + "/payments?customer=" + customer, Path: "count",
			Header: http.Header{"Authorization": {"Bearer alice"}}},
		Chaos: true,
	}
}

// idem's own middleware, in-process over the memory store, passes every row.
func TestIdemServerInProcessPassesEveryRow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(2e9, 0)}
	const ttl = 10 * time.Minute
	srv := idemtest.NewServer(
		idemtest.WithStore(memstore.New(memstore.WithClock(clock.Now))),
		idemtest.WithMiddlewareOptions(server.WithTTL(ttl)),
	)
	defer srv.Close()
	cfg := idemServerConfig(srv.URL, ttl)
	cfg.Sleep = clock.Sleep
	rep := run(t, cfg)
	wantEveryRowPasses(t, rep)
}

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
	if len(rep.Rows) != 23 {
		t.Errorf("%d rows, want 23", len(rep.Rows))
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
