package idem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestAttemptFromContext pins what the next RoundTripper sees of each attempt:
// its number, why the previous one was retried, the wait before it, whether
// it polls, and the key.
func TestAttemptFromContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}, {err: errConnReset()}, {status: 409}, {status: 201}}}
		tr := NewTransport(f, WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second))
		tr.rand = func() float64 { return 0 } // a bare 409's poll waits pollInterval/2
		req := mustRequest(t, ContextWithKey(context.Background(), "K"), http.MethodPost, "http://x/", "b")
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("RoundTrip = %v, %v; want 201", resp, err)
		}
		want := []AttemptInfo{
			{Number: 1, Key: "K"},
			{Number: 2, Key: "K", Reason: "status", Wait: 100 * time.Millisecond, Status: 503},
			{Number: 3, Key: "K", Reason: "network", Wait: 200 * time.Millisecond, Err: errConnReset()},
			{Number: 4, Key: "K", Reason: "in-progress", Poll: true, Status: 409, Wait: pollInterval / 2},
		}
		calls := f.Calls()
		if len(calls) != len(want) {
			t.Fatalf("%d attempts, want %d", len(calls), len(want))
		}
		for i, c := range calls {
			got, ok := AttemptFromContext(c.req.Context())
			if !ok {
				t.Fatalf("attempt %d: no AttemptInfo in its context", i+1)
			}
			if got.Err != nil && want[i].Err != nil && got.Err.Error() == want[i].Err.Error() {
				got.Err = want[i].Err
			}
			if got != want[i] {
				t.Errorf("attempt %d: AttemptInfo %+v\nwant %+v", i+1, got, want[i])
			}
		}
		if _, ok := AttemptFromContext(context.Background()); ok {
			t.Error("AttemptFromContext found an AttemptInfo in a bare context")
		}
	})
}

// TestOnDoneReport pins the Report of operations that end in each way, and
// that every WithOnDone function runs, in order, with the request's context.
func TestOnDoneReport(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	for _, tc := range []struct {
		name   string
		steps  []fakeStep
		opts   []Option
		method string
		want   Report
	}{
		{"success after a retry", []fakeStep{{status: 503}, {status: 201}}, nil, http.MethodPost,
			Report{Method: "POST", Host: "x", Key: "K", Attempts: 2, Status: 201, Stop: "success"}},
		{"final status", []fakeStep{{status: 404}}, nil, http.MethodGet,
			Report{Method: "GET", Host: "x", Key: "K", Attempts: 1, Status: 404, Stop: "final-status"}},
		{"attempts used", []fakeStep{{status: 503}}, []Option{WithMaxAttempts(3)}, http.MethodGet,
			Report{Method: "GET", Host: "x", Key: "K", Attempts: 3, Status: 503, Stop: "exhausted"}},
		{"budget", []fakeStep{{status: 503}}, []Option{WithRetryBudget(newBudget(budgetRatio(0), budgetMinPerSecond(0)))}, http.MethodGet,
			Report{Method: "GET", Host: "x", Key: "K", Attempts: 1, Status: 503, Stop: "budget", BudgetRefused: true}},
		{"not retryable", []fakeStep{{err: errConnReset()}}, []Option{WithAutoKeys(false)}, http.MethodPost,
			Report{Method: "POST", Host: "x", Attempts: 1, Stop: "not-retryable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := &fakeRT{steps: tc.steps}
				var got []Report
				var order []int
				opts := append([]Option{noWait(),
					WithOnDone(func(ctx context.Context, r Report) {
						if ctx.Value(ctxKey{}) != "v" {
							t.Error("WithOnDone did not get the request's context")
						}
						got = append(got, r)
						order = append(order, 1)
					}),
					WithOnDone(func(context.Context, Report) { order = append(order, 2) }),
				}, tc.opts...)
				tr := NewTransport(f, opts...)
				ctx := context.WithValue(context.Background(), ctxKey{}, "v")
				if tc.want.Key != "" {
					ctx = ContextWithKey(ctx, tc.want.Key)
				}
				start := time.Now()
				resp, err := tr.RoundTrip(mustRequest(t, ctx, tc.method, "http://x/", "b"))
				elapsed := time.Since(start)
				if resp != nil {
					_ = resp.Body.Close()
				}
				if len(got) != 1 || len(order) != 2 || order[0] != 1 || order[1] != 2 {
					t.Fatalf("WithOnDone calls: %d reports, order %v; want one report, order [1 2]", len(got), order)
				}
				r := got[0]
				if (r.Err == nil) != (err == nil) || (err != nil && !errors.Is(r.Err, err)) {
					t.Errorf("Report.Err = %v, RoundTrip returned %v", r.Err, err)
				}
				if r.Elapsed != elapsed {
					t.Errorf("Report.Elapsed = %v, RoundTrip took %v", r.Elapsed, elapsed)
				}
				r.Err, r.Elapsed = nil, 0
				if r != tc.want {
					t.Errorf("Report %+v\nwant   %+v", r, tc.want)
				}
			})
		})
	}
}

// TestReportStops pins the Report.Stop of the ends TestOnDoneReport does not
// drive: a deadline, a cancel, a host hold, an invalid key, a late answer.
func TestReportStops(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, tr *Transport, ctx context.Context, method string) Report {
		t.Helper()
		var got []Report
		tr.cfg.onDone = append(tr.cfg.onDone, func(_ context.Context, r Report) { got = append(got, r) })
		resp, err := tr.RoundTrip(mustRequest(t, ctx, method, "http://x/", "{}"))
		if resp != nil {
			_ = resp.Body.Close()
		}
		if len(got) != 1 {
			t.Fatalf("%d reports, want 1 (err %v)", len(got), err)
		}
		return got[0]
	}
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tr := NewTransport(&fakeRT{steps: []fakeStep{{err: errConnReset()}}}, WithMaxElapsed(time.Second), WithBackoff(time.Second, time.Second), WithJitter(NoJitter))
			if r := run(t, tr, context.Background(), http.MethodGet); r.Stop != "deadline" || !errors.As(r.Err, new(*Error)) || !r.Err.(*Error).Timeout() {
				t.Errorf("Stop %q, Err %v; want \"deadline\" and an *Error that is a time-out", r.Stop, r.Err)
			}
		})
	})
	t.Run("canceled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			tr := NewTransport(&fakeRT{steps: []fakeStep{{block: true}}})
			if r := run(t, tr, ctx, http.MethodGet); r.Stop != "canceled" || !errors.Is(r.Err, context.Canceled) {
				t.Errorf("Stop %q, Err %v; want \"canceled\"", r.Stop, r.Err)
			}
		})
	})
	t.Run("host-hold", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(0.1, 10)
			b.holdHost("x", time.Now().Add(time.Minute))
			tr := NewTransport(&fakeRT{steps: statusSteps(200)}, WithRetryBudget(b))
			if r := run(t, tr, context.Background(), http.MethodGet); r.Stop != "host-hold" || r.Attempts != 0 || !errors.Is(r.Err, ErrBudgetExhausted) {
				t.Errorf("Stop %q after %d attempts, Err %v; want \"host-hold\", none, ErrBudgetExhausted", r.Stop, r.Attempts, r.Err)
			}
		})
	})
	t.Run("invalid-key", func(t *testing.T) {
		tr := NewTransport(&fakeRT{steps: statusSteps(200)})
		if r := run(t, tr, ContextWithKey(context.Background(), "bad key"), http.MethodPost); r.Stop != "invalid-key" || !errors.Is(r.Err, ErrInvalidKey) {
			t.Errorf("Stop %q, Err %v; want \"invalid-key\"", r.Stop, r.Err)
		}
	})
	t.Run("late answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{steps: []fakeStep{{delay: 1500 * time.Millisecond, status: 201}, {block: true}}}
			tr := NewTransport(f, noWait(), WithAttemptTimeout(time.Second))
			if r := run(t, tr, context.Background(), http.MethodPost); r.Stop != "success" || r.Status != 201 || r.Attempts != 2 {
				t.Errorf("Report %+v; want the late 201 as a success after 2 attempts", r)
			}
		})
	})
}

// TestLoggerLines pins the log lines of a budget refusal, a host hold, and
// giving up on a final response that could have been retried.
func TestLoggerLines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		b := newBudget(budgetRatio(0), budgetMinPerSecond(0))
		tr := NewTransport(&fakeRT{steps: []fakeStep{{status: 503, header: http.Header{"Retry-After": {"1"}}}, {status: 200}}},
			WithRetryBudget(b), WithLogger(logger), noWait())
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("%v, %v; want the 503 back (the budget refuses the retry)", resp, err)
		}
		_ = resp.Body.Close()
		resp, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		for _, want := range []string{
			`level=WARN msg="idem: retry refused by the budget"`,
			`level=WARN msg="idem: giving up" method=GET url=http://x/ key="" attempts=1 status=503 stop=budget`,
			`level=INFO msg="idem: waiting for a host hold"`,
		} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no line with %s in:\n%s", want, logs.String())
			}
		}
	})
}

// TestGivingUpWithoutARetryIsLoggedAndReported: a retryable answer (503) that
// the operation cannot retry, because its body is a stream (no GetBody, no
// length) or because it is a POST without a key, ends as "not-retryable" in
// the Report, and WithLogger says so at Warn with the reason; a status that is
// simply not retried (404), or that WithRetryIf refused, is "final-status"
// and logs no give-up. Over a real server: the stream really is sent once.
func TestGivingUpWithoutARetryIsLoggedAndReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		status   int
		method   string
		stream   bool
		getBody  error // GetBody fails with it, when not nil
		opts     []Option
		stop     string
		giveUp   string // a fragment of the Warn line, "" for none
		attempts int32
	}{
		{"503 to a stream body", 503, http.MethodPut, true, nil, nil,
			"not-retryable", `stop=not-retryable detail="the request body cannot be sent again`, 1},
		{"503, and GetBody fails", 503, http.MethodPut, false, errors.New("spool gone"), nil,
			"not-retryable", `stop=not-retryable detail="idem: request body cannot be replayed: spool gone"`, 1},
		{"503 to a POST without a key", 503, http.MethodPost, false, nil, []Option{WithAutoKeys(false)},
			"not-retryable", `stop=not-retryable detail="a POST without an Idempotency-Key is never repeated"`, 1},
		{"404", 404, http.MethodPut, true, nil, nil, "final-status", "", 1},
		{"503 that WithRetryIf refuses", 503, http.MethodPut, false, nil,
			[]Option{WithRetryIf(func(*http.Response, error, bool) bool { return false })}, "final-status", "", 1},
		{"503 to a replayable body", 503, http.MethodPut, false, nil, []Option{WithMaxAttempts(2)},
			"exhausted", `stop=exhausted detail="all attempts used"`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(tc.status)
			}))
			t.Cleanup(srv.Close)
			var logs bytes.Buffer
			var reports []Report
			opts := append([]Option{noWait(), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				WithOnDone(func(_ context.Context, r Report) { reports = append(reports, r) })}, tc.opts...)
			tr := NewTransport(srv.Client().Transport, opts...)
			var body io.Reader = strings.NewReader("payload")
			if tc.stream {
				body = io.MultiReader(body) // no GetBody, no length: a stream
			}
			req, err := http.NewRequest(tc.method, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.getBody != nil {
				req.GetBody = func() (io.ReadCloser, error) { return nil, tc.getBody }
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v; want the %d back", err, tc.status)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status || n.Load() != tc.attempts {
				t.Errorf("%d after %d attempts at the server; want %d after %d", resp.StatusCode, n.Load(), tc.status, tc.attempts)
			}
			if len(reports) != 1 || reports[0].Stop != tc.stop {
				t.Errorf("reports %+v; want one with Stop %q", reports, tc.stop)
			}
			line := ""
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, `msg="idem: giving up"`) {
					line = l
				}
			}
			switch {
			case tc.giveUp == "" && line != "":
				t.Errorf("logged %q; want no give-up line for a status that is not retried", line)
			case tc.giveUp != "" && (!strings.HasPrefix(line, "time=") || !strings.Contains(line, "level=WARN") || !strings.Contains(line, tc.giveUp)):
				t.Errorf("give-up line %q; want a WARN with %s; the log:\n%s", line, tc.giveUp, logs.String())
			}
		})
	}
}
