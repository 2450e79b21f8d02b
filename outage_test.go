package idem

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDefaultClientRidesOutABurstOverARealServer is the scenario over
// a real server and the real clock: 50 POSTs start at once through one
// default Transport as the server goes down for 3s (503 to everything), more
// than the retry quota's 100 retries carry on their own. On the quota that
// ended an operation on the first retry it could not pay for, none of the 50
// completed; now at least 40 must, and the server must see no more than the first attempts,
// the bucket's 100 retries and the few earned by time during the outage. The
// 95% target is TestDefaultsRideOutAShortOutage's, under a fake clock and
// fixed seeds (97.6%); here the jitter is random and 2 to 3 of the 50
// operations, whose seven turns all fall inside the outage, fail in a typical
// run, so the bound is 40, which a run fails by chance about once in 10^5. It
// takes about 12s, in parallel with the rest.
func TestDefaultClientRidesOutABurstOverARealServer(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	var failed, created atomic.Int64
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if down.Load() {
			failed.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		created.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	back := time.AfterFunc(3*time.Second, func() { down.Store(false) }) // the outage's length, not a synchronisation
	t.Cleanup(func() { back.Stop() })

	client := NewClient()
	var wg sync.WaitGroup
	var completed atomic.Int64
	for range 50 {
		wg.Go(func() {
			resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"amount":1}`))
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				completed.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d of 50 completed; %d attempts answered 503 during the outage, %d answered 201", completed.Load(), failed.Load(), created.Load())
	if n := completed.Load(); n < 40 {
		t.Errorf("%d of 50 operations completed across a 3s outage, want at least 40", n)
	}
	// 50 first attempts, 100 retries from the full bucket, one a second
	// earned over the 3s, and one for a unit earned as the outage ends.
	if n := failed.Load(); n > 50+100+3+1 {
		t.Errorf("%d attempts during the outage, want at most 154", n)
	}
}
