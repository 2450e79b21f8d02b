package idem

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRetryQuotaArithmetic pins the default quota's numbers, written out: a
// full bucket of 500 pays 100 retries of 5, or 50 after time-outs (10 each);
// it refills by answers only, up to 500.
func TestRetryQuotaArithmetic(t *testing.T) {
	t.Parallel()
	q := newRetryQuota()
	paid := 0
	for q.take(false) > 0 {
		paid++
	}
	if paid != 100 {
		t.Errorf("a full bucket paid %d retries, want 100", paid)
	}
	q.give(9)
	if got := q.take(true); got != 0 {
		t.Errorf("9 units paid a retry after a time-out (cost %d), want none: it costs 10", got)
	}
	if got := q.take(false); got != 5 {
		t.Errorf("9 units: retry cost %d, want 5", got)
	}
	q.give(10_000)
	if q.tokens != 500 {
		t.Errorf("tokens %d after a large refund, want the capacity 500", q.tokens)
	}
}

// TestDefaultsAcrossASustainedOutage: a default client against a dependency
// that answers 503 to everything. Its quota pays 100 retries (16 operations of
// 6 retries, and 4 for the 17th); after that each operation makes one
// attempt: 300 operations make 400 attempts, 1.33 per operation.
func TestDefaultsAcrossASustainedOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}}}
		tr := NewTransport(f)
		for range 300 {
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
		}
		if n := len(f.Calls()); n != 400 {
			t.Errorf("300 operations made %d attempts, want 400 (%.2f per operation, want 1.33)", n, float64(n)/300)
		}
	})
}

// TestDefaultsRideOutAShortOutage: 20 operations start over the 3s of a total
// outage (every attempt answered 503 until it ends); a default client
// completes at least 19 of them (95%). The share comes from a model of full
// jitter with base 300ms and 7 attempts, drawn independently: about 99.8% of
// such operations outlast a 3s outage, and the 20 use about 75 of the quota's
// 100 retries.
func TestDefaultsRideOutAShortOutage(t *testing.T) {
	t.Parallel()
	for seed := range uint64(5) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			end := start.Add(3 * time.Second)
			var mu sync.Mutex
			rnd := rand.New(rand.NewPCG(seed, 1))
			rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				code := http.StatusCreated
				if time.Now().Before(end) {
					code = http.StatusServiceUnavailable
				}
				return &http.Response{StatusCode: code, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
			})
			tr := NewTransport(rt)
			tr.rand = func() float64 { mu.Lock(); defer mu.Unlock(); return rnd.Float64() }
			var wg sync.WaitGroup
			var completed int
			for i := range 20 {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 150 * time.Millisecond) // the fake clock: starts spread over the outage
					resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/", "{}"))
					if err == nil {
						_ = resp.Body.Close()
						if resp.StatusCode == http.StatusCreated {
							mu.Lock()
							completed++
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if completed < 19 {
				t.Errorf("seed %d: %d of 20 operations completed across a 3s outage, want at least 19", seed, completed)
			}
		})
	}
}

// TestRetryQuotaRefills: answers refill the quota, time does not. An empty
// quota refuses the retry; an operation answered at its first attempt gives
// 1 unit back, and one answered after a retry gives that retry's cost back.
func TestRetryQuotaRefills(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 200}}}
		tr := NewTransport(f, noWait())
		q := tr.retryQuota(tr.policy())
		q.tokens = 4          // less than one retry
		time.Sleep(time.Hour) // time alone gives nothing back
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if q.tokens != 5 {
			t.Fatalf("tokens %d after an answer at the first attempt, want 4+1 = 5", q.tokens)
		}
		f.steps = []fakeStep{{status: 503}, {status: 200}}
		f.calls = nil
		resp, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if len(f.Calls()) != 2 || q.tokens != 5 {
			t.Errorf("%d attempts, tokens %d; want the retry paid (5) and given back when answered: 2 attempts, 5 tokens", len(f.Calls()), q.tokens)
		}
		f.steps = []fakeStep{{status: 503}}
		f.calls = nil
		q.tokens = 4
		resp, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if len(f.Calls()) != 1 || q.tokens != 4 {
			t.Errorf("%d attempts, tokens %d; want the retry refused by the empty quota (1 attempt) and nothing given for a 503", len(f.Calls()), q.tokens)
		}
	})
}

// TestRetryQuotaDoesNotPayForPolls: the polls after a keyed 409 cost the
// quota nothing, so duplicates that poll a slow first request cannot empty it
// (twenty duplicates of an 8 s handler did, and then none of them got its
// answer). An empty quota still lets a keyed operation poll to its replay.
func TestRetryQuotaDoesNotPayForPolls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 409}, {status: 409}, {status: 409}, {status: 201}}}
		tr := NewTransport(f, noWait())
		q := tr.retryQuota(tr.policy())
		q.tokens = 0
		req := mustRequest(t, ContextWithKey(context.Background(), "dup-1"), http.MethodPost, "http://x/", "body")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("polling with an empty quota: %v, want the 201", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 201 || len(f.Calls()) != 4 || q.tokens != 0 {
			t.Errorf("status %d after %d attempts, tokens %d; want 201 after 4 (three polls the quota does not pay for), tokens 0",
				resp.StatusCode, len(f.Calls()), q.tokens)
		}
	})
}
