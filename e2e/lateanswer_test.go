package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server/chaos"
)

const (
	// lateAttemptTimeout is the client's attempt time-out: a mobile or BFF
	// client's, far below the late answers.
	lateAttemptTimeout = 300 * time.Millisecond
	// lateSlack is how long after the late answer is written the caller may
	// get it (issue 8: "within about a second of the write", generously bound
	// for a loaded machine).
	lateSlack = 1500 * time.Millisecond
	// lateGuard cuts the operation (a context deadline) this long after the
	// late answer, so that a failing run ends quickly instead of running to the
	// client's 30 s cap; a passing run ends long before it.
	lateGuard = 5 * time.Second
)

// TestBinaryLateAnswerAfterWrite is issue 8's reproduction, over the
// idem-server binary on each store: idem's client with its defaults and a
// 300 ms attempt time-out posts a payment whose answer the server writes late
// (Chaos-Delay-After-Write: 1.2 s, and 4 s), after the payment is made. Every
// attempt times out before the answer; the first goes on past its time-out
// (the client's late attempts), and later ones meet the key in progress. The
// operation must end in the 201 (the first attempt's own, or its replay to a
// poll, whichever comes first) within about a second of the late answer, with
// exactly one payment, never a 409 or an "attempts exhausted" error.
func TestBinaryLateAnswerAfterWrite(t *testing.T) {
	skipShort(t)
	t.Parallel()
	for _, st := range binaryStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			for _, late := range []time.Duration{1200 * time.Millisecond, 4 * time.Second} {
				t.Run(late.String(), func(t *testing.T) {
					t.Parallel()
					// A server of its own: the 409's Retry-After is estimated
					// from the server's recent handler times, so a 4 s payment
					// finished first (parallel subtests start in any order)
					// would make the 1.2 s one's duplicate come back at 4 s.
					// That estimate is a documented limit; this test is the
					// issue's scenario, one late payment on a fresh server.
					args, forget := st.args(t)
					srv := startServer(t, append(args, "-chaos")...)
					checkLateAnswer(t, srv, late, forget)
				})
			}
		})
	}
}

// checkLateAnswer runs one payment answered late after its write, and checks
// how it ended.
func checkLateAnswer(t *testing.T, srv *serverProcess, late time.Duration, forget func(key string)) {
	rec := &retries{}
	client := &http.Client{Transport: idem.NewTransport(baseTransport(),
		idem.WithAttemptTimeout(lateAttemptTimeout),
		idem.WithOnRetry(rec.onRetry), // observes only: the policy is the default one
	)}
	customer := "cus_late_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), late+lateGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", strings.NewReader(paymentBody(customer)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(chaos.HeaderDelayAfterWrite, late.String())

	start := time.Now()
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	elapsed := time.Since(start)

	// The key the client generated, so that the store can be cleaned up.
	evs := rec.all()
	var ie *idem.Error
	switch {
	case resp != nil:
		forget(keyOf(resp))
	case errors.As(err, &ie):
		forget(ie.Key)
	case len(evs) > 0:
		forget(evs[0].Key)
	}
	history := retryHistory(evs)

	switch {
	case err != nil:
		t.Errorf("answer written at %v: the operation ended in an error after %v: %v\nattempts: %s",
			late, elapsed.Round(time.Millisecond), err, history)
	case resp.StatusCode != http.StatusCreated:
		t.Errorf("answer written at %v: the operation ended with %d (replayed: %v, Retry-After %q) after %v, want the 201\nbody: %s\nattempts: %s",
			late, resp.StatusCode, idem.Replayed(resp), resp.Header.Get("Retry-After"), elapsed.Round(time.Millisecond),
			strings.TrimSpace(string(body)), history)
	case elapsed > late+lateSlack:
		t.Errorf("answer written at %v: the 201 came after %v, more than %v after the answer\nattempts: %s",
			late, elapsed.Round(time.Millisecond), lateSlack, history)
	default:
		t.Logf("answer written at %v: 201 after %v (replayed: %v); attempts: %s", late, elapsed.Round(time.Millisecond), idem.Replayed(resp), history)
	}

	// A 201 means the payment is there. Otherwise the first attempt may still
	// be running: wait (bounded) for its payment to show.
	n := srv.payments(t, customer)
	for until := start.Add(late + 3*time.Second); n == 0 && time.Now().Before(until); {
		time.Sleep(50 * time.Millisecond) // polling the server's ledger: nothing to wait on
		n = srv.payments(t, customer)
	}
	if n != 1 {
		t.Errorf("answer written at %v: %d payments for the operation, want exactly 1", late, n)
	}
}

// retryHistory formats what each retried attempt got: "1:timeout(wait 120ms)
// 2:409 Retry-After 30s(wait 0s)".
func retryHistory(evs []idem.AttemptInfo) string {
	if len(evs) == 0 {
		return "no retry"
	}
	parts := make([]string, len(evs))
	for i, ev := range evs {
		what := fmt.Sprint(ev.Status)
		if ev.Err != nil {
			what = ev.Err.Error()
			if errors.Is(ev.Err, context.DeadlineExceeded) {
				what = "timeout"
			}
		}
		if ev.RetryAfter > 0 {
			what += " Retry-After " + ev.RetryAfter.String()
		}
		parts[i] = fmt.Sprintf("%d:%s(wait %v)", ev.Number-1, what, ev.Wait.Round(time.Millisecond))
	}
	return strings.Join(parts, " ")
}
