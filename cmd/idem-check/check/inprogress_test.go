package check

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A server that ignores the slow headers answers the first request of an
// in-progress row at once, and the row must not FAIL, whichever the check
// sees first: the request written, or its answer (it SKIPs, the first over
// before the duplicate, or, when the check saw the first's end late, judges
// the duplicate's replay). Before, when the
// answer was seen first (a loaded machine), the row FAILed with "the first
// request got 201": 2 of 80 runs of a flaw that ignores the slow headers.
func TestInProgressFastFirstSkips(t *testing.T) {
	var mu sync.Mutex
	answers := map[string]string{} // per key, the first answer: a replay layer without a claim
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if a, ok := answers[key]; ok {
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, a)
			return
		}
		answers[key] = fmt.Sprintf(`{"n":%d}`, len(answers))
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answers[key])
	}))
	defer srv.Close()
	c, err := (&Config{URL: srv.URL, Body: []byte(`{"a":1}`), Slow: http.Header{"X-Slow": {"1"}},
		Grace: time.Millisecond, Transport: srv.Client().Transport}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: c, counter: &countingTransport{next: c.Transport, limit: 1 << 20},
		reads: new(atomic.Int64), waited: new(atomic.Int64)}
	r.client = &http.Client{Transport: r.counter, CheckRedirect: noRedirects}
	ctx := context.Background()
	for i := range 300 {
		for _, prefer := range []bool{false, true} {
			// Let the first request's answer come back before the
			// check looks, as a busy machine does now and then.
			if i%2 == 0 {
				runtime.Gosched()
			}
			row := inProgress(ctx, r, prefer)[0]
			if row.Verdict == Fail {
				t.Fatalf("run %d, %s: %s (%s)", i, row.ID, row.Verdict, row.Got)
			}
		}
	}
}
