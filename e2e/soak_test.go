package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/idemtest"
)

// The soak's load and faults.
const (
	soakClients     = 20
	soakOps         = 25 // logical payments per client
	soakInFlight    = 5  // operations a client runs at once
	soakFailRate    = 0.2
	soakDropRate    = 0.2
	soakMaxAttempts = 6
	soakCap         = 10 * time.Second // per operation (WithMaxElapsed)
	// soakSlack is how far past its cap an operation may end: the time to
	// notice the cap and return, generous for a loaded machine.
	soakSlack = 3 * time.Second
	// soakReruns bounds the rounds that run again, with their keys, the
	// operations that ended without success.
	soakReruns = 5
)

// soakOp is how one logical operation of the soak ended.
type soakOp struct {
	customer, key string
	status        int   // the final response's status, 0 if none
	err           error // set when the operation ended without a response
	attempts      int
	elapsed       time.Duration
}

func (o soakOp) ok() bool { return o.err == nil && o.status == http.StatusCreated }

// soakClient is one client of the soak: one idem Transport, as one service
// instance has, running its operations soakInFlight at a time.
type soakClient struct {
	http    *http.Client
	mu      sync.Mutex
	retries map[string]int // by key, of the operations in flight
}

func newSoakClient() *soakClient {
	c := &soakClient{retries: map[string]int{}}
	c.http = &http.Client{Transport: idem.NewTransport(baseTransport(),
		idem.WithMaxAttempts(soakMaxAttempts),
		idem.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		idem.WithAttemptTimeout(3*time.Second),
		idem.WithMaxElapsed(soakCap),
		idem.WithOnRetry(func(_ context.Context, ev idem.AttemptInfo) {
			c.mu.Lock()
			c.retries[ev.Key]++
			c.mu.Unlock()
		}),
	)}
	return c
}

// pay runs the logical payment of customer, with the key its business
// operation always has.
func (c *soakClient) pay(url, customer string) soakOp {
	o := soakOp{customer: customer, key: idem.KeyFor("e2e-soak", customer)}
	start := time.Now()
	r, err := postPayment(idem.ContextWithKey(context.Background(), o.key), c.http, url, customer)
	o.elapsed = time.Since(start)
	c.mu.Lock()
	o.attempts = c.retries[o.key] + 1
	delete(c.retries, o.key)
	c.mu.Unlock()
	switch {
	case err != nil:
		o.err = err
		var e *idem.Error
		if errors.As(err, &e) {
			o.attempts = e.Attempts
		}
	case r.bodyErr != nil:
		o.err = r.bodyErr
	default:
		o.status = r.status
	}
	return o
}

// runSoak runs customers' payments, spread over soakClients concurrent
// clients.
func runSoak(url string, customers []string) []soakOp {
	out := make([]soakOp, len(customers))
	var wg sync.WaitGroup
	for c := range soakClients {
		client := newSoakClient()
		jobs := make(chan int)
		var cwg sync.WaitGroup
		for range soakInFlight {
			cwg.Go(func() {
				for i := range jobs {
					out[i] = client.pay(url, customers[i])
				}
			})
		}
		wg.Go(func() {
			for i := c; i < len(customers); i += soakClients {
				jobs <- i
			}
			close(jobs)
			cwg.Wait()
			client.http.CloseIdleConnections()
		})
	}
	wg.Wait()
	return out
}

// TestSoak: 20 concurrent clients × 25 logical payments (5 in flight per
// client) while the server
// answers 20% of requests 503 (Retry-After: 1) and cuts the connection of 20%
// after recording them, on each store. No customer is ever charged twice;
// every operation ends within its cap with the server's answer or a clear
// *idem.Error; the operations that did not succeed, run again with their keys,
// end charged exactly once. The histogram of attempts per operation is logged.
func TestSoak(t *testing.T) {
	t.Parallel()
	for _, sc := range storeCases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			srv := idemtest.NewServer(
				idemtest.WithStore(sc.open(t)),
				idemtest.WithChaos(chaos.WithFailRate(soakFailRate), chaos.WithDropRate(soakDropRate),
					chaos.WithDelayMax(5*time.Millisecond)),
				idemtest.WithMiddlewareOptions(server.WithInProgressWait(5*time.Second)),
			)
			defer srv.Close()
			customers := make([]string, soakClients*soakOps)
			for i := range customers {
				customers[i] = fmt.Sprintf("cus_%02d_%02d", i%soakClients, i/soakClients)
			}

			start := time.Now()
			ops := runSoak(srv.URL, customers)
			elapsed := time.Since(start)
			hist := map[int]int{}
			requests := 0
			var again []string
			for _, o := range ops {
				checkSoakEnding(t, o)
				hist[o.attempts]++
				requests += o.attempts
				switch n := srv.Payments(o.customer); {
				case o.ok() && n != 1:
					t.Errorf("%s: succeeded with %d payments, want 1", o.customer, n)
				case n > 1:
					t.Errorf("%s: %d payments, want at most 1", o.customer, n)
				}
				if !o.ok() {
					again = append(again, o.customer)
				}
			}
			t.Logf("%s store: %d operations in %v, %d requests; attempts per operation: %s; %d ended without success",
				sc.name, len(ops), elapsed.Round(time.Millisecond), requests, histogram(hist), len(again))
			if max := len(ops) * soakMaxAttempts; requests > max {
				t.Errorf("%d requests, more than %d operations × %d attempts", requests, len(ops), soakMaxAttempts)
			}
			if hist[1] == len(ops) {
				t.Error("no operation needed a retry: the faults did not fire")
			}

			for round := 1; len(again) > 0; round++ {
				if round > soakReruns {
					t.Fatalf("%d operations still without success after %d re-runs", len(again), soakReruns)
				}
				var next []string
				for _, o := range runSoak(srv.URL, again) {
					checkSoakEnding(t, o)
					if !o.ok() {
						next = append(next, o.customer)
					}
				}
				again = next
			}
			for _, c := range customers {
				if n := srv.Payments(c); n != 1 {
					t.Errorf("%s: %d payments, want exactly 1", c, n)
				}
			}
			if n := srv.Payments(""); n != len(customers) {
				t.Errorf("ledger holds %d payments for %d operations", n, len(customers))
			}
		})
	}
}

// checkSoakEnding checks invariant 2 for one operation: it ended within its
// cap, with the server's answer (201, or the 503 of a last attempt) or a clear
// *idem.Error that names its key and says it ran out of retries.
func checkSoakEnding(t *testing.T, o soakOp) {
	t.Helper()
	if o.elapsed > soakCap+soakSlack {
		t.Errorf("%s: ended after %v, past its cap of %v", o.customer, o.elapsed, soakCap)
	}
	if o.attempts < 1 || o.attempts > soakMaxAttempts {
		t.Errorf("%s: %d attempts, want 1 to %d", o.customer, o.attempts, soakMaxAttempts)
	}
	if o.err == nil {
		if o.status != http.StatusCreated && o.status != http.StatusServiceUnavailable {
			t.Errorf("%s: ended with status %d, want 201 or a last 503", o.customer, o.status)
		}
		return
	}
	var e *idem.Error
	if !errors.As(o.err, &e) || e.Key != o.key || !errors.Is(o.err, idem.ErrExhausted) {
		t.Errorf("%s: ended with %v (%T), want an *idem.Error with its key and ErrExhausted", o.customer, o.err, o.err)
	}
}

// histogram formats attempts -> operations as "1:312 2:110 ...".
func histogram(h map[int]int) string {
	keys := make([]int, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d:%d", k, h[k])
	}
	return strings.Join(parts, " ")
}
