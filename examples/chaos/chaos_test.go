// Package chaos_test is a template to copy into your own tests: it sends many
// logical payments through the idem client to the companion server while the
// server fails, drops and delays requests at random, and then checks the two
// promises that matter:
//
//   - exactly once: every payment that succeeded was charged once, and no
//     operation was ever charged twice;
//   - every call ends, within its time cap, with the server's answer or a clear
//     *idem.Error.
//
// Run it with
//
//	go test -race ./examples/chaos
//
// To test your own service, replace idemtest.NewServer with your server (its
// fault injection: server/chaos wraps any handler) and Payments with a count
// of your own side effects.
package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/idemtest"
)

// The load and the faults.
const (
	ops      = 60                    // logical payments
	workers  = 12                    // concurrent callers
	failRate = 0.2                   // answered 503 + Retry-After: 1, no work done
	dropRate = 0.2                   // done and recorded, then the connection is cut
	delayMax = 20 * time.Millisecond // random delay before the business write
	// opCap bounds each operation (WithMaxElapsed); an attempt is cut at the cap.
	opCap = 5 * time.Second
	// capSlack is how far past its cap an operation may end: the time to
	// notice the cap and return, generous for a loaded machine.
	capSlack = 2 * time.Second
)

// outcome is how one logical operation ended.
type outcome struct {
	customer, key string
	status        int   // the final response's status, 0 if none
	err           error // the *idem.Error, if the operation ended without a response
	elapsed       time.Duration
}

func (o outcome) ok() bool { return o.err == nil && o.status == http.StatusCreated }

// newClient returns the idem client under test. retries counts the retries
// it makes.
func newClient(retries *atomic.Int64) *http.Client {
	return &http.Client{Transport: idem.NewTransport(
		// Keep-alives off: net/http resends a keyed request by itself when a
		// reused connection is dropped before the response, which would hide
		// attempts from idem (and from this test's counts).
		&http.Transport{DisableKeepAlives: true},
		idem.WithMaxAttempts(8),
		idem.WithBackoff(5*time.Millisecond, 50*time.Millisecond), // short: the test stays fast
		idem.WithAttemptTimeout(time.Second),
		idem.WithMaxElapsed(opCap),
		idem.WithOnRetry(func(context.Context, idem.AttemptInfo) { retries.Add(1) }),
	)}
}

// pay runs one logical payment for customer with key.
// The result is named so that the deferred function sets elapsed on the value
// returned: with an unnamed result, "return o" copies o before defers run.
func pay(client *http.Client, url, customer, key string) (o outcome) {
	o = outcome{customer: customer, key: key}
	start := time.Now()
	defer func() { o.elapsed = time.Since(start) }()
	body := fmt.Sprintf(`{"customer":%q,"amount":1250,"currency":"EUR"}`, customer)
	req, err := http.NewRequestWithContext(idem.ContextWithKey(context.Background(), key),
		http.MethodPost, url+"/payments", strings.NewReader(body))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		o.err = err
		return o
	}
	o.status = resp.StatusCode
	return o
}

// runAll runs the operations of customers on workers goroutines.
func runAll(client *http.Client, url string, customers []string) []outcome {
	out := make([]outcome, len(customers))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				c := customers[i]
				// The key belongs to the business operation: the same one on a
				// re-run, as an app that restarts would send.
				out[i] = pay(client, url, c, idem.KeyFor("chaos-template", c))
			}
		})
	}
	for i := range customers {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out
}

func TestExactlyOnceUnderRandomFaults(t *testing.T) {
	t.Parallel()
	srv := idemtest.NewServer(idemtest.WithChaos(
		chaos.WithFailRate(failRate), chaos.WithDropRate(dropRate), chaos.WithDelayMax(delayMax)))
	defer srv.Close()
	var retries atomic.Int64
	client := newClient(&retries)
	defer client.CloseIdleConnections()

	customers := make([]string, ops)
	for i := range customers {
		customers[i] = fmt.Sprintf("cus_%03d", i)
	}
	var again []string // operations to run again: those that did not succeed
	for _, o := range runAll(client, srv.URL, customers) {
		checkEnding(t, o)
		switch n := srv.Payments(o.customer); {
		case o.ok() && n != 1:
			t.Errorf("%s: succeeded with %d payments, want 1", o.key, n)
		case n > 1:
			t.Errorf("%s: %d payments, want at most 1", o.key, n)
		}
		if !o.ok() {
			t.Logf("%s: did not succeed: status %d, %v", o.key, o.status, o.err)
			again = append(again, o.customer)
		}
	}
	t.Logf("%d operations, %d retries, %d ended without success", ops, retries.Load(), len(again))
	if retries.Load() == 0 {
		t.Error("no retry was made: the faults did not fire")
	}

	// An operation that gave up may still have been charged (its last response
	// was lost): running it again with its key must finish it, never charge it
	// twice.
	for round := 0; len(again) > 0; round++ {
		if round == 5 {
			t.Fatalf("%d operations still fail after %d re-runs", len(again), round)
		}
		var next []string
		for _, o := range runAll(client, srv.URL, again) {
			checkEnding(t, o)
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
	if n := srv.Payments(""); n != ops {
		t.Errorf("ledger holds %d payments for %d operations", n, ops)
	}
}

// TestPayMeasuresElapsed pins the template's own clock: an operation's elapsed
// time is measured on the value pay returns, so checkEnding's cap check can
// fail. The handler holds the answer until the test has seen it start, so the
// operation takes a measurable time.
func TestPayMeasuresElapsed(t *testing.T) {
	t.Parallel()
	started := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- time.Now()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	before := time.Now()
	o := pay(srv.Client(), srv.URL, "cus_clock", "clock-1")
	handled := <-started
	if !o.ok() {
		t.Fatalf("pay: status %d, %v", o.status, o.err)
	}
	if min := handled.Sub(before); o.elapsed <= 0 || o.elapsed < min {
		t.Errorf("elapsed = %v, want at least the %v until the server answered", o.elapsed, min)
	}
}

// checkEnding checks invariant 2: the operation ended within its cap with the
// server's answer (201, or the 503 of a last attempt) or a clear *idem.Error.
func checkEnding(t *testing.T, o outcome) {
	t.Helper()
	if o.elapsed > opCap+capSlack {
		t.Errorf("%s: ended after %v, past its cap of %v", o.key, o.elapsed, opCap)
	}
	if o.err == nil {
		if o.status != http.StatusCreated && o.status != http.StatusServiceUnavailable {
			t.Errorf("%s: ended with status %d, want 201 or a last 503", o.key, o.status)
		}
		return
	}
	var e *idem.Error
	if !errors.As(o.err, &e) {
		t.Errorf("%s: error %v (%T) is not an *idem.Error", o.key, o.err, o.err)
		return
	}
	if e.Attempts < 1 || e.Key != o.key || !errors.Is(o.err, idem.ErrExhausted) {
		t.Errorf("%s: unclear error: attempts %d, key %q, %v", o.key, e.Attempts, e.Key, o.err)
	}
}
