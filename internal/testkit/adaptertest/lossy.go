package adaptertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testkit/lossyproxy"
)

// lossyOps is how many operations the lossy scenario sends.
const lossyOps = 24

// testLossy: the idem client pays lossyOps operations through a proxy that
// loses the first answer of each, and the second of every third, while the
// ledger refuses the first charge of every fourth (503, through the
// framework's error path). Every operation must end 201 with the one charge
// it made: no operation charged twice, and no 201 without its charge.
func testLossy(t *testing.T, e *env) {
	proxy := lossyproxy.Start(t, e.srv.URL, func(_ string, attempt int) bool { return attempt == 1 })
	// Every third operation loses its second answer too: its own proxy.
	proxy2 := lossyproxy.Start(t, e.srv.URL, func(_ string, attempt int) bool { return attempt <= 2 })
	client := &http.Client{Transport: idem.NewTransport(&http.Transport{DisableKeepAlives: true},
		idem.WithMaxAttempts(6),
		idem.WithBackoff(time.Millisecond, 20*time.Millisecond),
		idem.WithAttemptTimeout(5*time.Second),
		idem.WithMaxElapsed(20*time.Second),
	)}
	type result struct {
		op     string
		status int
		charge Charge
		err    error
	}
	results := make([]result, lossyOps)
	var wg sync.WaitGroup
	for i := range lossyOps {
		op := fmt.Sprintf("%s-%d", e.op, i)
		if i%4 == 0 {
			e.ledger.armFail(op, 1)
		}
		base := proxy.URL
		if i%3 == 0 {
			base = proxy2.URL
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := result{op: op}
			defer func() { results[i] = res }()
			req, err := http.NewRequest(http.MethodPost, base+"/ops/"+op, strings.NewReader(amount(i+1)))
			if err != nil {
				res.err = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				res.err = err
				return
			}
			defer resp.Body.Close()
			res.status = resp.StatusCode
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode/100 == 2 && len(b) > 0 {
				res.err = json.Unmarshal(b, &res.charge)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * waitLimit):
		t.Fatalf("the operations did not end within %v", 2*waitLimit)
	}
	duplicates, fake, failed := 0, 0, 0
	for _, r := range results {
		charges := e.ledger.Charges(r.op)
		if len(charges) > 1 {
			duplicates++
			t.Errorf("%s: charged %d times", r.op, len(charges))
		}
		switch {
		case r.err == nil && r.status/100 == 2 && (len(charges) == 0 || charges[0].ID != r.charge.ID):
			fake++
			t.Errorf("%s: %d for charge %q, the ledger has %v", r.op, r.status, r.charge.ID, charges)
		case r.err != nil || r.status != http.StatusCreated:
			failed++
			t.Errorf("%s: ended %d %v, want 201", r.op, r.status, r.err)
		}
	}
	t.Logf("%d operations through lost answers: %d duplicate effects, %d fake successes, %d failed",
		lossyOps, duplicates, fake, failed)
}
