package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server/chaos"
)

// dupHeadStart is how long after the first request its duplicate is sent: on
// loopback, with the server warmed up, the first has claimed the key by then.
// A duplicate that arrives first anyway is reported as such, not as a bug.
const dupHeadStart = 300 * time.Millisecond

// dupAnswer is what one raw request (no retry layer) got.
type dupAnswer struct {
	status     int
	replayed   bool
	retryAfter string
	problem    string
	err        error
	sent, took time.Duration // from the case's start, and its own duration
}

// rawPost sends one keyed payment of customer with headers h (pairs of name,
// value) and no retry, sent at offset since start.
func rawPost(ctx context.Context, url, key, customer string, start time.Time, h ...string) dupAnswer {
	a := dupAnswer{sent: time.Since(start)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/payments", strings.NewReader(paymentBody(customer)))
	if err != nil {
		a.err = err
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := (&http.Client{Transport: baseTransport()}).Do(req)
	if err != nil {
		a.err, a.took = err, time.Since(start)-a.sent
		return a
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	a.took = time.Since(start) - a.sent
	a.status, a.err = resp.StatusCode, err
	a.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	a.retryAfter = resp.Header.Get("Retry-After")
	var p struct {
		Type string `json:"type"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(body, &p) == nil {
		a.problem = p.Type
	}
	return a
}

// startLatePayment sends, under a new key, a payment whose answer the server
// writes late after the payment, and returns once it has had its head start:
// the key and customer, the time it was sent, and where its answer will come.
func startLatePayment(srv *serverProcess, forget func(key string), late time.Duration) (key, customer string, start time.Time, first <-chan dupAnswer) {
	key, customer = "e2e-dup-"+randomSuffix(), "cus_dup_"+randomSuffix()
	forget(key)
	start = time.Now()
	answer := make(chan dupAnswer, 1)
	go func() {
		answer <- rawPost(context.Background(), srv.URL, key, customer, start, chaos.HeaderDelayAfterWrite, late.String())
	}()
	time.Sleep(dupHeadStart) // the head start is the scenario, not a synchronisation
	return key, customer, start, answer
}

// TestBinaryDuplicateWaits checks the server half of issue 8 over the
// idem-server binary on each store, with raw requests (no retry layer): a
// duplicate that arrives while the first request runs waits for it by
// default and gets its replay; a duplicate that says Prefer: wait=1 gets the
// 409 within about a second, with a short Retry-After (not the 30 s lease);
// and when the first request fails (its client hangs up before the write:
// 503, the claim released), the waiting duplicate runs the handler itself.
// One payment in every case.
func TestBinaryDuplicateWaits(t *testing.T) {
	skipShort(t)
	t.Parallel()
	for _, st := range binaryStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			args, forget := st.args(t)
			srv := startServer(t, append(args, "-chaos")...)
			// Warm up: the first request opens the store's connections.
			warm := "e2e-warm-" + randomSuffix()
			forget(warm)
			if a := rawPost(context.Background(), srv.URL, warm, "cus_warm_"+randomSuffix(), time.Now()); a.err != nil || a.status != http.StatusCreated {
				t.Fatalf("warm-up payment: %d %v", a.status, a.err)
			}

			t.Run("replay after the wait", func(t *testing.T) {
				t.Parallel()
				const late = 1200 * time.Millisecond
				key, customer, start, first := startLatePayment(srv, forget, late)
				dup := rawPost(context.Background(), srv.URL, key, customer, start)
				orig := <-first
				if orig.replayed {
					t.Fatalf("the duplicate arrived first (original: %d replayed; duplicate: %d): the machine is too loaded for a %v head start",
						orig.status, dup.status, dupHeadStart)
				}
				if orig.err != nil || orig.status != http.StatusCreated {
					t.Errorf("original: %d %v, want 201", orig.status, orig.err)
				}
				end := dup.sent + dup.took
				switch {
				case dup.err != nil || dup.status != http.StatusCreated || !dup.replayed:
					t.Errorf("duplicate sent at %v: %d (replayed %v, Retry-After %q, %s) %v after %v, want the 201 replay after waiting",
						dup.sent.Round(time.Millisecond), dup.status, dup.replayed, dup.retryAfter, dup.problem, dup.err, dup.took.Round(time.Millisecond))
				case end > late+time.Second:
					t.Errorf("duplicate got the replay at %v, more than 1s after the answer (%v)", end.Round(time.Millisecond), late)
				}
				if n := srv.payments(t, customer); n != 1 {
					t.Errorf("%d payments, want 1", n)
				}
			})

			t.Run("Prefer wait=1 bounds the wait", func(t *testing.T) {
				t.Parallel()
				const late = 4 * time.Second
				key, customer, start, first := startLatePayment(srv, forget, late)
				// The guard ends a duplicate that waits for the whole answer today.
				ctx, cancel := context.WithTimeout(context.Background(), late)
				dup := rawPost(ctx, srv.URL, key, customer, start, "Prefer", "wait=1")
				cancel()
				if dup.status == http.StatusCreated && !dup.replayed {
					t.Fatalf("the duplicate arrived first: the machine is too loaded for a %v head start", dupHeadStart)
				}
				ra, raErr := strconv.Atoi(dup.retryAfter)
				switch {
				case dup.err != nil || dup.status != http.StatusConflict:
					t.Errorf("duplicate with Prefer: wait=1: %d %v after %v, want a 409 within about 1s",
						dup.status, dup.err, dup.took.Round(time.Millisecond))
				case dup.took > 2*time.Second:
					t.Errorf("duplicate with Prefer: wait=1 got its 409 after %v, want about 1s", dup.took.Round(time.Millisecond))
				case raErr != nil || ra < 1 || ra > 10:
					t.Errorf("409 Retry-After %q: want a short hint, 1 to 10 s (not the remaining 30 s lease)", dup.retryAfter)
				}
				if orig := <-first; orig.err != nil || orig.status != http.StatusCreated {
					t.Errorf("original: %d %v, want 201", orig.status, orig.err)
				}
				if n := srv.payments(t, customer); n != 1 {
					t.Errorf("%d payments, want 1", n)
				}
			})

			t.Run("the waiter runs it when the original fails", func(t *testing.T) {
				t.Parallel()
				key, customer := "e2e-dup-"+randomSuffix(), "cus_dup_"+randomSuffix()
				forget(key)
				start := time.Now()
				// The original's write waits 1 s; its client hangs up at 2 head
				// starts, so the handler answers 503 without writing and the
				// claim is released while the duplicate waits.
				ctx, cancel := context.WithTimeout(context.Background(), 2*dupHeadStart)
				defer cancel()
				first := make(chan dupAnswer, 1)
				go func() {
					first <- rawPost(ctx, srv.URL, key, customer, start, chaos.HeaderDelay, "1s")
				}()
				time.Sleep(dupHeadStart)
				guard, gcancel := context.WithTimeout(context.Background(), 5*time.Second)
				dup := rawPost(guard, srv.URL, key, customer, start)
				gcancel()
				orig := <-first
				if orig.err == nil {
					t.Fatalf("the original was answered %d (replayed %v) before its client hung up at %v: the machine is too loaded",
						orig.status, orig.replayed, 2*dupHeadStart)
				}
				if !errors.Is(orig.err, context.DeadlineExceeded) {
					t.Errorf("original: %v, want its client's deadline", orig.err)
				}
				if dup.err != nil || dup.status != http.StatusCreated || dup.replayed {
					t.Errorf("duplicate: %d (replayed %v, Retry-After %q, %s) %v after %v, want a 201 of its own run once the original released the key",
						dup.status, dup.replayed, dup.retryAfter, dup.problem, dup.err, dup.took.Round(time.Millisecond))
				}
				if n := srv.payments(t, customer); n != 1 {
					t.Errorf("%d payments, want 1", n)
				}
			})
		})
	}
}
