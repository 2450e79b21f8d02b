package check

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
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

// A duplicate that reaches the handler before the lease row's slow request
// executes first, and the slow request gets its answer replayed: that
// operation shows nothing of a lease, and the row tries another, up to
// leaseTries. Overtaken once, the row judges the next operation: PASS on a
// correct server, FAIL on one whose claims expire under their handler.
// Overtaken every time, it is a SKIP that says why, never a PASS.
func TestLeaseRowTriesAgainWhenOvertaken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		flaws     []flaw
		overtake  int
		want      Verdict
		wantLongs int64 // slow requests received, both methods
	}{
		{"overtaken once", nil, 1, Pass, 3},
		{"overtaken once, claims expire", []flaw{flawLeaseExpires}, 1, Fail, 3},
		{"overtaken every time", nil, 2 * leaseTries, Skip, 2 * leaseTries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFlawedServer(t, tc.flaws...)
			s.setOvertake(tc.overtake)
			cfg := s.config()
			rep := runReport(t, cfg)
			wantWithinBound(t, s, cfg, rep)
			for _, m := range []string{"POST", "PUT"} {
				row := rep.RowOf(m, "in-progress-lease")
				if row == nil {
					t.Fatalf("no row %s in-progress-lease", m)
				}
				if row.Verdict != tc.want {
					t.Errorf("%s in-progress-lease: %s (%s), want %s", m, row.Verdict, row.Got, tc.want)
				}
				if tc.want == Skip && !strings.Contains(row.Got, "reached the handler before the slow request") {
					t.Errorf("%s in-progress-lease: %q does not say why it judged nothing", m, row.Got)
				}
			}
			if n := s.longs.Load(); n != tc.wantLongs {
				t.Errorf("%d slow requests reached the server, want %d", n, tc.wantLongs)
			}
		})
	}
}

// lateFirst is a Transport that holds back the answer to the lease row's
// slow request (X-Long) until a duplicate of it has been answered, as a
// loaded machine may read the answer of a handler that ran at once: the
// duplicate, sent one step after the request was written, reaches a handler
// already done.
type lateFirst struct {
	next     http.RoundTripper
	mu       sync.Mutex
	answered map[string]chan struct{} // per key, closed once a duplicate is answered
}

func (l *lateFirst) wait(key string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.answered[key]
	if !ok {
		ch = make(chan struct{})
		l.answered[key] = ch
	}
	return ch
}

func (l *lateFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get("Idempotency-Key")
	resp, err := l.next.RoundTrip(req)
	ch := l.wait(key)
	if req.Header.Get("X-Long") != "" {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
		}
		return resp, err
	}
	l.mu.Lock()
	select {
	case <-ch:
	default:
		close(ch)
	}
	l.mu.Unlock()
	return resp, err
}

// A server that ignores the lease row's slow headers answers the slow
// request at once; read late (a loaded machine), it leaves time for
// duplicates, each sent after the handler was done and answered with the
// replay. That shows nothing of a lease: the row SKIPs, saying no
// duplicate found the operation in progress. Before, it PASSed ("one
// execution"): once in five runs of make test with pgbench beside it.
func TestLeaseRowSkipsWhenNoDuplicateMetTheRun(t *testing.T) {
	t.Parallel()
	s := newFlawedServer(t, flawIgnoresSlow)
	cfg := s.config()
	cfg.Transport = &lateFirst{next: s.Client().Transport, answered: map[string]chan struct{}{}}
	r := rowRunner(t, cfg)
	for i := range 5 {
		row := lease(context.Background(), r)[0]
		if row.Verdict != Skip || !strings.Contains(row.Got, "no duplicate found the operation in progress") {
			t.Fatalf("run %d: %s (%s), want a SKIP that says no duplicate found the operation in progress", i, row.Verdict, row.Got)
		}
	}
}

// rowRunner is a runner of one row's function, with cfg's defaults and no
// bound a row could reach.
func rowRunner(t *testing.T, cfg Config) *runner {
	t.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: c, counter: &countingTransport{next: c.Transport, limit: 1 << 20},
		reads: new(atomic.Int64), waited: new(atomic.Int64), readLimit: 1 << 20}
	r.client = &http.Client{Transport: r.counter, CheckRedirect: noRedirects}
	return r
}

// Duplicates that fail (5xx) while the slow request runs are a WARN of the
// lease row, as before it asked for a duplicate that found the operation in
// progress: a failed one shows no such thing, and the row must still say
// that they failed, not SKIP.
func TestLeaseRowWarnsOfFailedDuplicates(t *testing.T) {
	t.Parallel()
	answered := make(chan struct{})
	var dups atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Long") == "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			if dups.Add(1) == 3 {
				close(answered)
			}
			return
		}
		<-answered // held until the row has its duplicates (their 503s)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	cfg := Config{URL: srv.URL, Body: []byte(`{"a":1}`), LeaseSlow: http.Header{"X-Long": {"1"}},
		LeaseStep: 20 * time.Millisecond, Transport: srv.Client().Transport}
	r := rowRunner(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	row := lease(ctx, r)[0]
	if row.Verdict != Warn || !strings.Contains(row.Got, "duplicate(s) failed") {
		t.Fatalf("%s (%s), want a WARN that says the duplicates failed", row.Verdict, row.Got)
	}
}
