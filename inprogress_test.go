package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// in409 is a 409 "in progress" with the given Retry-After.
func in409(retryAfter string) fakeStep {
	return fakeStep{status: http.StatusConflict, header: http.Header{"Retry-After": {retryAfter}}, body: "in progress"}
}

// TestInProgressPastCapMakesLastAttempt is issue 8's scenario: the first
// attempt is written but answers late (cut by the 300ms attempt time-out), the
// retry gets 409 with Retry-After: 30, which ends past the 30s cap. The
// operation does not end on the 409: it waits what remains less one attempt
// (30s - 0.3s - 0.3s) and makes one last attempt, which gets the replay.
func TestInProgressPastCapMakesLastAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{block: true}, in409("30"), {status: http.StatusCreated, body: "paid"}}}
		tr := NewTransport(f, noWait(), WithAttemptTimeout(300*time.Millisecond))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, "paid", readAll(t, resp))
		calls := f.Calls()
		require.Len(t, calls, 3)
		assert.Equal(t, []time.Duration{0, 300 * time.Millisecond, 29700 * time.Millisecond}, attemptOffsets(start, calls))
		assert.Equal(t, 29700*time.Millisecond, time.Since(start), "never past the cap")
	})
}

// TestInProgressLastAttemptCallerDeadline: the caller's deadline (5s) comes
// before the cap: the last attempt is fitted under it, never past it.
func TestInProgressLastAttemptCallerDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{in409("30"), {status: http.StatusCreated}}}
		tr := NewTransport(f, noWait(), WithAttemptTimeout(time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(ctx, "k"), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, []time.Duration{0, 4 * time.Second}, attemptOffsets(start, f.Calls()))
	})
}

// TestInProgressLastAttemptOnlyOnce: a second 409 after the last attempt
// ends the operation with it, at once.
func TestInProgressLastAttemptOnlyOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{in409("30")}}
		tr := NewTransport(f, noWait(), WithMaxElapsed(10*time.Second))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "k"), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusConflict, resp.StatusCode)
		// No attempt time-out: the last attempt is worth half of what remains.
		assert.Equal(t, []time.Duration{0, 5 * time.Second}, attemptOffsets(start, f.Calls()))
		assert.Equal(t, 5*time.Second, time.Since(start))
	})
}

// TestInProgressPastMaxRetryAfter: a 409 asking for more than
// WithMaxRetryAfter (30s) under a long cap gets the last attempt within
// WithMaxRetryAfter: 30s less half of it.
func TestInProgressPastMaxRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{in409("7200"), {status: http.StatusCreated}}}
		tr := NewTransport(f, noWait(), WithMaxElapsed(time.Hour))
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "k"), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, []time.Duration{0, 15 * time.Second}, attemptOffsets(start, f.Calls()))
	})
}

// TestRetryAfterPastCapStopsOn429And503: a 429 or 503 whose Retry-After ends
// past the cap ends the operation at once (the server asked for room), with
// that response.
func TestRetryAfterPastCapStopsOn429And503(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{steps: []fakeStep{{status: code, header: http.Header{"Retry-After": {"30"}}}}}
			tr := NewTransport(f, noWait(), WithMaxElapsed(10*time.Second))
			start := time.Now()
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/payments", "{}"))
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, code, resp.StatusCode)
			assert.Len(t, f.Calls(), 1)
			assert.Zero(t, time.Since(start))
		})
	}
}

// TestInProgressPollsDoNotUseAttempts: with WithMaxAttempts(2), a time-out
// then three 409 polls still reach the answer: a poll is not a failure.
func TestInProgressPollsDoNotUseAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}, in409("1"), in409("1"), in409("1"), {status: 201}}}
		tr := NewTransport(f, noWait(), WithMaxAttempts(2))
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Len(t, f.Calls(), 5)
	})
}

// TestPreferWait: every keyed attempt that may meet its key in progress says
// how long it can wait (RFC 7240 Prefer: wait=N, whole seconds, less a margin
// for the answer to travel back): with the caller's key, from the first
// attempt; with a key generated for the operation, from the second (no
// server can have a new key in progress). A caller's own wait preference is
// kept; unkeyed requests get none.
func TestPreferWait(t *testing.T) {
	t.Parallel()
	const callerKey, generated = "caller", "generated"
	for _, tc := range []struct {
		name   string
		opts   []Option
		method string
		key    string // callerKey (through the context), generated, or "" (none)
		prefer string // the caller's Prefer header
		want   [2][]string
	}{
		{"attempt time-out 5s", []Option{WithAttemptTimeout(5 * time.Second)}, http.MethodPost, callerKey, "", [2][]string{{"wait=4"}, {"wait=4"}}},
		{"attempt time-out 300ms", []Option{WithAttemptTimeout(300 * time.Millisecond)}, http.MethodPost, callerKey, "", [2][]string{{"wait=0"}, {"wait=0"}}},
		{"the cap (30s)", nil, http.MethodPost, callerKey, "", [2][]string{{"wait=27"}, {"wait=27"}}},
		{"the caller's other preference", []Option{WithAttemptTimeout(5 * time.Second)}, http.MethodPost, callerKey, "return=minimal", [2][]string{{"return=minimal", "wait=4"}, {"return=minimal", "wait=4"}}},
		{"the caller's wait", []Option{WithAttemptTimeout(5 * time.Second)}, http.MethodPost, callerKey, "wait=9", [2][]string{{"wait=9"}, {"wait=9"}}},
		{"generated key, attempt time-out 5s", []Option{WithAttemptTimeout(5 * time.Second)}, http.MethodPost, generated, "", [2][]string{nil, {"wait=4"}}},
		{"generated key, the cap (30s)", nil, http.MethodPost, generated, "", [2][]string{nil, {"wait=27"}}},
		{"generated key, the caller's other preference", nil, http.MethodPost, generated, "return=minimal", [2][]string{{"return=minimal"}, {"return=minimal", "wait=27"}}},
		{"unkeyed GET", nil, http.MethodGet, "", "", [2][]string{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeRT{steps: statusSteps(http.StatusServiceUnavailable, http.StatusOK)}
				tr := NewTransport(f, append(tc.opts, noWait())...)
				ctx := context.Background()
				if tc.key == callerKey {
					ctx = ContextWithKey(ctx, "k-1")
				}
				req := mustRequest(t, ctx, tc.method, "http://x/", "")
				if tc.prefer != "" {
					req.Header.Set("Prefer", tc.prefer)
				}
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				calls := f.Calls()
				require.Len(t, calls, 2)
				for i, c := range calls {
					assert.Equal(t, tc.want[i], c.req.Header.Values("Prefer"), "attempt %d", i+1)
				}
				if tc.prefer == "" {
					assert.Empty(t, req.Header.Values("Prefer"), "the caller's request is unchanged")
				} else {
					assert.Equal(t, []string{tc.prefer}, req.Header.Values("Prefer"), "the caller's request is unchanged")
				}
			})
		})
	}
}

func TestPreferWaitValues(t *testing.T) {
	t.Parallel()
	for limit, want := range map[time.Duration]time.Duration{
		0:                       0,
		300 * time.Millisecond:  0,
		1100 * time.Millisecond: 0,           // 1.1s - 0.11s = 0.99s
		2 * time.Second:         time.Second, // 2s - 0.2s = 1.8s
		30 * time.Second:        27 * time.Second,
	} {
		assert.Equal(t, want, preferWait(limit), "preferWait(%v)", limit)
	}
}

// TestInProgressPollsAtRetryAfter pins issue 8's late answer: keyed 409s are
// polls, so each wait is the Retry-After the server named plus its small
// spread (at most a tenth), never the exponential backoff, which with the
// default 300ms base would have grown past 1s by the fourth retry and
// delivered the replay seconds after it was ready.
func TestInProgressPollsAtRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{in409("1"), in409("1"), in409("1"), in409("1"), in409("1"), {status: http.StatusCreated}}}
		tr := NewTransport(f, WithMaxElapsed(30*time.Second))
		tr.rand = func() float64 { return 0.999 } // the longest spread and backoff
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "k"), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		offsets := attemptOffsets(start, f.Calls())
		require.Len(t, offsets, 6)
		for i := 1; i < len(offsets); i++ {
			gap := offsets[i] - offsets[i-1]
			assert.GreaterOrEqual(t, gap, time.Second, "never before the Retry-After")
			assert.LessOrEqual(t, gap, 1100*time.Millisecond, "retry %d: a 409 poll waits the Retry-After plus at most a tenth", i)
		}
	})
}

// TestInProgressPollWaitsForTheAnswer pins how the two waits fit together
// (issue 8): with a 300ms attempt time-out, the attempt that follows a 409
// is a poll: it tells the server it can wait (Prefer: wait=4) and is not cut
// at 300ms, so a server holding it until the first request's answer exists
// (here 2s) delivers the replay the moment it is written.
func TestInProgressPollWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{
			{block: true}, // the first attempt: written, answered late
			in409("1"),    // its duplicate, told it may not wait (wait=0)
			{status: http.StatusCreated, body: "paid", delay: 2 * time.Second}, // held until the answer exists
		}}
		tr := NewTransport(f, noWait(), WithAttemptTimeout(300*time.Millisecond))
		tr.rand = func() float64 { return 0 }
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/payments", "{}"))
		require.NoError(t, err)
		assert.Equal(t, "paid", readAll(t, resp))
		calls := f.Calls()
		require.Len(t, calls, 3)
		assert.Equal(t, []time.Duration{0, 300 * time.Millisecond, 1300 * time.Millisecond}, attemptOffsets(start, calls))
		assert.Equal(t, "wait=0", calls[1].req.Header.Get("Prefer"), "a 300ms attempt cannot wait")
		assert.Equal(t, "wait=4", calls[2].req.Header.Get("Prefer"), "a poll can")
		assert.Equal(t, 3300*time.Millisecond, time.Since(start), "the replay as soon as it exists")
	})
}

// TestPlainConflictReturnedAtOnce: an API that does not implement keys
// answers 409 to a POST (a name already taken). The first attempt under a
// generated key cannot meet that key in progress anywhere, so the 409 is the
// answer: one request, no wait started.
func TestPlainConflictReturnedAtOnce(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"username already taken"}`))
	}))
	defer srv.Close()
	retried := false
	client := NewClient(WithOnRetry(func(context.Context, AttemptInfo) { retried = true }))
	start := time.Now()
	resp, err := client.Post(srv.URL+"/users", "application/json", nil)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || n.Load() != 1 || retried {
		t.Errorf("status %d after %d requests (a retry started: %v); want the 409 after 1 request, no retry", resp.StatusCode, n.Load(), retried)
	}
	t.Logf("returned after %v", elapsed)
}

// TestLastAttemptAfterConflictNeedsMinimum: after a keyed 409 whose
// Retry-After ends past the deadline, a last attempt is made only when at
// least 100ms of attempt fit: with 150ms left (an attempt's worth of 75ms),
// none is.
func TestLastAttemptAfterConflictNeedsMinimum(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		left      time.Duration
		wantCalls int
	}{
		{150 * time.Millisecond, 1}, // half of it, 75ms, is under the 100ms minimum
		{250 * time.Millisecond, 2}, // 125ms fits
	} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{steps: []fakeStep{{status: 409, header: http.Header{"Retry-After": {"30"}}}, {status: 201}}}
			tr := NewTransport(f, noWait(), WithMaxElapsed(tc.left))
			resp, err := tr.RoundTrip(mustRequest(t, ContextWithKey(context.Background(), "k"), http.MethodPost, "http://x/", "{}"))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if n := len(f.Calls()); n != tc.wantCalls {
				t.Errorf("with %v left after a 409: %d attempts, want %d", tc.left, n, tc.wantCalls)
			}
		})
	}
}
