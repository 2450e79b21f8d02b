package bench

import (
	"context"
	"testing"
	"time"
)

func TestContendersPost(t *testing.T) {
	t.Parallel()
	srv := newOverheadServer()
	defer srv.Close()
	for _, c := range OverheadContenders() {
		t.Run(c.Name, func(t *testing.T) {
			if err := postPayment(context.Background(), c.New(memTransport{}), "http://in-memory.invalid/payments", "", 0); err != nil {
				t.Errorf("in memory: %v", err)
			}
			tr := newBaseTransport()
			defer tr.CloseIdleConnections()
			if err := postPayment(context.Background(), c.New(tr), srv.URL, "", 0); err != nil {
				t.Errorf("loopback: %v", err)
			}
		})
	}
}

// TestRetryableHTTPQuiet pins that go-retryablehttp's default logger, which
// writes every request to stderr, is switched off in every section.
func TestRetryableHTTPQuiet(t *testing.T) {
	t.Parallel()
	if rc := newRetryableHTTP(memTransport{}); rc.Logger != nil {
		t.Errorf("go-retryablehttp logger is %T, want nil", rc.Logger)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"one value", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 0.5, 50 * time.Millisecond},
		{"q 0", ms(1, 2, 3), 0, 1 * time.Millisecond},
		{"q 1", ms(1, 2, 3), 1, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.q, got, tt.want)
			}
		})
	}
}

func TestFaultClientsRoutes(t *testing.T) {
	t.Parallel()
	// Every peer without a key posts to the unprotected route (the keyed
	// route would refuse it with 400), and idem's keyed row is present.
	idemKeyed := false
	for _, c := range FaultClients() {
		if c.Route == RouteKeyed && c.Name != "idem" && !c.CallerKey {
			t.Errorf("%s posts to %s without a key", c.Name, c.Route)
		}
		idemKeyed = idemKeyed || c.Name == "idem" && c.Route == RouteKeyed
	}
	if !idemKeyed {
		t.Error("no idem row on the keyed route")
	}
}
