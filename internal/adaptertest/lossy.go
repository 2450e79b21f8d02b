package adaptertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
)

// lossyOps is how many operations the lossy scenario sends.
const lossyOps = 24

// lossyProxy forwards each request to upstream, reads the whole answer, and
// then, when lose says so for the request's key and attempt (1, 2, ...),
// closes the client's connection without a byte: the server did the work,
// the client never hears of it.
func lossyProxy(t *testing.T, upstream string, lose func(attempt int) bool) *httptest.Server {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	var mu sync.Mutex
	attempts := map[string]int{}
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(server.HeaderKey)
		mu.Lock()
		attempts[key]++
		n := attempts[key]
		mu.Unlock()
		out, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if lose(n) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.Close)
	t.Cleanup(tr.CloseIdleConnections)
	return p
}

// testLossy: the idem client pays lossyOps operations through a proxy that
// loses the first answer of each, and the second of every third, while the
// ledger refuses the first charge of every fourth (503, through the
// framework's error path). Every operation must end 201 with the one charge
// it made: no operation charged twice, and no 201 without its charge.
func testLossy(t *testing.T, e *env) {
	proxy := lossyProxy(t, e.srv.URL, func(attempt int) bool { return attempt == 1 })
	// Every third operation loses its second answer too: its own proxy.
	proxy2 := lossyProxy(t, e.srv.URL, func(attempt int) bool { return attempt <= 2 })
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
