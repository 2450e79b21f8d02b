package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRequestWait: the store is asked to wait the middleware's limit, or the
// client's Prefer: wait when it is shorter, which Preference-Applied then
// confirms.
func TestRequestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		opts        []Option
		prefer      []string
		wantWait    time.Duration
		wantApplied string
	}{
		{"default", nil, nil, DefaultInProgressWait, ""},
		{"configured", []Option{WithInProgressWait(2 * time.Second)}, nil, 2 * time.Second, ""},
		{"zero", []Option{WithInProgressWait(0)}, nil, 0, ""},
		{"client shorter", nil, []string{"wait=2"}, 2 * time.Second, "wait=2"},
		{"client zero", nil, []string{"wait=0"}, 0, "wait=0"},
		{"client equal", []Option{WithInProgressWait(3 * time.Second)}, []string{"wait=3"}, 3 * time.Second, "wait=3"},
		{"client longer", nil, []string{"wait=60"}, DefaultInProgressWait, ""},
		{"client wants more than a zero limit", []Option{WithInProgressWait(0)}, []string{"wait=3"}, 0, ""},
		{"among other preferences", nil, []string{"respond-async, Wait=1;x=y, handling=lenient"}, time.Second, "wait=1"},
		{"malformed is ignored", nil, []string{"wait=soon"}, DefaultInProgressWait, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &fakeStore{}
			r := request("POST", "/x", "{}", HeaderKey, "k")
			r.Header[HeaderPrefer] = tt.prefer
			rec := serve(Middleware(s, tt.opts...)(counting(created)), r)
			if rec.Code != http.StatusCreated || len(s.reqs) != 1 {
				t.Fatalf("got %d after %d store calls", rec.Code, len(s.reqs))
			}
			if got := s.reqs[0].Wait; got != tt.wantWait {
				t.Errorf("Request.Wait = %v, want %v", got, tt.wantWait)
			}
			if got := rec.Header().Get(HeaderPreferenceApplied); got != tt.wantApplied {
				t.Errorf("Preference-Applied = %q, want %q", got, tt.wantApplied)
			}
		})
	}
}

func TestPreferWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lines  []string
		want   time.Duration
		wantOK bool
	}{
		{nil, 0, false},
		{[]string{""}, 0, false},
		{[]string{"wait=5"}, 5 * time.Second, true},
		{[]string{"WAIT = 5"}, 5 * time.Second, true},
		{[]string{`wait="7"`}, 7 * time.Second, true},
		{[]string{"wait=5; foo=bar"}, 5 * time.Second, true},
		{[]string{"respond-async", "wait=4"}, 4 * time.Second, true},
		{[]string{`return=minimal; x="a,wait=1", wait=9`}, 9 * time.Second, true},
		{[]string{"wait=3, wait=8"}, 3 * time.Second, true},             // the first counts
		{[]string{"wait=x, wait=8"}, 0, false},                          // the first counts, even malformed
		{[]string{"wait"}, 0, false},                                    // no value
		{[]string{"wait="}, 0, false},                                   // empty value
		{[]string{"wait=-1"}, 0, false},                                 // no sign in delta-seconds
		{[]string{"wait=1.5"}, 0, false},                                // whole seconds only
		{[]string{"wait=99999999999999999999999"}, maxPreferWait, true}, // capped, no overflow
		{[]string{"waiting=3"}, 0, false},
		{[]string{`x="unterminated, wait=2`}, 0, false},
	}
	for _, tt := range tests {
		h := http.Header{HeaderPrefer: tt.lines}
		got, ok := preferWait(h)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("preferWait(%q) = %v, %v; want %v, %v", tt.lines, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzPreferWait(f *testing.F) {
	for _, s := range []string{"wait=5", `wait="1"`, "respond-async, wait=10; a=b", `a="\",wait=1", wait=2`, "wait=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := preferWait(http.Header{HeaderPrefer: {s}})
		if d < 0 || d > maxPreferWait || (!ok && d != 0) {
			t.Fatalf("preferWait(%q) = %v, %v", s, d, ok)
		}
		if ok && d%time.Second != 0 {
			t.Fatalf("preferWait(%q) = %v: not whole seconds", s, d)
		}
	})
}

// TestInProgressRetryAfter pins how the 409's Retry-After is computed.
func TestInProgressRetryAfter(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		name          string
		p90           time.Duration
		known         bool
		waited, lease time.Duration
		want          time.Duration
	}{
		{"no history, lease known", 0, false, 0, 30 * s, s},
		{"no history, lease unknown", 0, false, 0, 0, s},
		{"estimate below the lease", 3 * s, true, 0, 30 * s, 3 * s},
		{"lease below the estimate", 10 * s, true, 0, 2 * s, 2 * s},
		{"time waited is taken off", 8 * s, true, 5 * s, 30 * s, 3 * s},
		{"first slower than the estimate", 2 * s, true, 5 * s, 30 * s, s},
		{"at least a second", 100 * time.Millisecond, true, 0, 30 * s, s},
		{"lease under a second", 5 * s, true, 0, 200 * time.Millisecond, s},
		{"lease unknown", 4 * s, true, 0, 0, 4 * s},
		{"rounded to the nearest second, not up", 1200 * time.Millisecond, true, 0, 30 * s, s},
		{"rounded up from the half", 2500 * time.Millisecond, true, 0, 30 * s, 3 * s},
		{"rounding never passes the lease", 5 * s, true, 0, 2600 * time.Millisecond, 2 * s},
	}
	for _, tt := range tests {
		if got := inProgressRetryAfter(tt.p90, tt.known, tt.waited, tt.lease); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDurationsP90(t *testing.T) {
	t.Parallel()
	var d durations
	if _, ok := d.p90(); ok {
		t.Fatal("p90 of nothing reported known")
	}
	for i := 1; i <= 10; i++ {
		d.add(time.Duration(i) * time.Second)
	}
	if got, ok := d.p90(); !ok || got != 9*time.Second {
		t.Errorf("p90 of 1..10 s = %v, %v; want 9s", got, ok)
	}
	for range durationSamples { // the ring forgets the old samples
		d.add(time.Second)
	}
	if got, _ := d.p90(); got != time.Second {
		t.Errorf("p90 after %d samples of 1s = %v, want 1s", durationSamples, got)
	}
}

// TestConflictRetryAfterIsAnEstimate: the 409 sent past the wait carries the
// p90 of recent handler runs less the time waited, not the store's whole
// lease (issue 8: a 30 s lease sent as Retry-After: 30 for an answer due in
// under a second).
func TestConflictRetryAfterIsAnEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inProgress := false
		var mu sync.Mutex
		s := &fakeStore{do: func(ctx context.Context, req Request, run RunFunc) (Result, error) {
			mu.Lock()
			busy := inProgress
			mu.Unlock()
			if busy {
				time.Sleep(req.Wait) // the store waits its Wait, in fake time
				return Result{Outcome: OutcomeInProgress, RetryAfter: 30 * time.Second}, nil
			}
			resp, _ := run(ctx)
			return Result{Outcome: OutcomeExecuted, Response: resp}, nil
		}}
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(4 * time.Second) // fake time: every run takes 4 s
			w.WriteHeader(http.StatusCreated)
		})
		mw := Middleware(s, WithInProgressWait(time.Second))(slow)
		rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k1"))
		if rec.Code != http.StatusCreated {
			t.Fatalf("first: %d", rec.Code)
		}
		mu.Lock()
		inProgress = true
		mu.Unlock()
		rec = serve(mw, request("POST", "/x", "{}", HeaderKey, "k2"))
		checkProblem(t, rec, http.StatusConflict, ProblemInProgress)
		// p90 4 s, minus the 1 s waited: 3 s, under the 30 s lease.
		if got := rec.Header().Get("Retry-After"); got != "3" {
			t.Errorf("Retry-After = %q, want 3", got)
		}
	})
}

// TestRedirectDoesNotConsumeTheKey: a keyed POST answered 308 by the
// protected handler is not recorded, so the client's next hop with the same
// key (another path, so another fingerprint) runs instead of getting 422.
// Over TLS and HTTP/2, as the client follows the redirect.
func TestRedirectDoesNotConsumeTheKey(t *testing.T) {
	t.Parallel()
	s := &fakeStore{}
	runs := map[string]int{}
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("POST /old", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		runs["/old"]++
		mu.Unlock()
		http.Redirect(w, r, "/new", http.StatusPermanentRedirect)
	})
	mux.HandleFunc("POST /new", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		runs["/new"]++
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	srv := httptest.NewUnstartedServer(Middleware(s)(mux))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	post := func(path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"amount":1}`))
		req.Header.Set(HeaderKey, "caller-key-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.TLS == nil {
			t.Fatalf("POST %s went over %s, want HTTP/2 over TLS", path, resp.Proto)
		}
		return resp, string(body)
	}
	// The client follows the 308 with the same key and body.
	resp, body := post("/old")
	if resp.StatusCode != http.StatusCreated || body != `{"amount":1}` || resp.Header.Get(HeaderReplayed) != "" {
		t.Fatalf("POST /old, redirected: %d %s %v, want /new's 201, executed", resp.StatusCode, body, resp.Header)
	}
	// The key now belongs to the request that finished it, at /new.
	resp, body = post("/new")
	if resp.StatusCode != http.StatusCreated || body != `{"amount":1}` || resp.Header.Get(HeaderReplayed) != "true" {
		t.Fatalf("POST /new again: %d %s %v, want the replay", resp.StatusCode, body, resp.Header)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["/old"] != 1 || runs["/new"] != 1 {
		t.Errorf("runs = %v, want /old and /new once each", runs)
	}
}

// TestRecordedStatuses pins which statuses are recorded.
func TestRecordedStatuses(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{200: true, 201: true, 204: true, 301: false, 303: false, 307: false,
		308: false, 400: false, 401: false, 402: true, 403: false, 404: true, 409: true, 410: true, 413: false,
		415: false, 422: false, 429: false, 500: false, 503: false} {
		if got := recorded(status); got != want {
			t.Errorf("recorded(%d) = %v, want %v", status, got, want)
		}
	}
}
