package idem

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestRetryQuotaArithmetic pins the default quota's numbers, written out: a
// full bucket of 500 pays 100 retries of 5, or 50 after time-outs (10 each);
// answers refill it up to 500, and so does time, one unit every 200ms.
func TestRetryQuotaArithmetic(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	q := newRetryQuota()
	paid := 0
	for q.take(t0, false) > 0 {
		paid++
	}
	if paid != 100 {
		t.Errorf("a full bucket paid %d retries, want 100", paid)
	}
	q.give(t0, 9)
	if got := q.take(t0, true); got != 0 {
		t.Errorf("9 units paid a retry after a time-out (cost %d), want none: it costs 10", got)
	}
	if got := q.take(t0, false); got != 5 {
		t.Errorf("9 units: retry cost %d, want 5", got)
	}
	// 4 units left. Time: 199ms earns nothing, 200ms one unit, 1s five.
	if got := q.take(t0.Add(199*time.Millisecond), false); got != 0 || q.tokens != 4 {
		t.Errorf("after 199ms: cost %d, tokens %d; want 0 and 4", got, q.tokens)
	}
	if got := q.take(t0.Add(200*time.Millisecond), false); got != 5 || q.tokens != 0 {
		t.Errorf("after 200ms: cost %d, tokens %d; want a retry paid from 4+1 units, 0 left", got, q.tokens)
	}
	if got := q.take(t0.Add(1100*time.Millisecond), false); got != 0 || q.tokens != 4 {
		t.Errorf("900ms later: cost %d, tokens %d; want 0 and 4 (4 units earned)", got, q.tokens)
	}
	q.give(t0, 1) // a time before the last one earns nothing and takes nothing back
	if q.tokens != 5 {
		t.Errorf("tokens %d after giving 1 with an earlier time, want 5", q.tokens)
	}
	q.give(t0.Add(2*time.Second), 10_000)
	if q.tokens != 500 {
		t.Errorf("tokens %d after a large refund, want the capacity 500", q.tokens)
	}
	// A full bucket earns nothing while full: an hour later one retry
	// leaves 495, and 200ms after that it holds 496.
	q.take(t0.Add(time.Hour), false)
	q.give(t0.Add(time.Hour+200*time.Millisecond), 0)
	if q.take(t0.Add(time.Hour+200*time.Millisecond), false); q.tokens != 491 {
		t.Errorf("tokens %d, want 500-5 (a retry) +1 (200ms) -5 (another) = 491", q.tokens)
	}
}

// TestRetryQuotaFullFlag: the flag give reads without the lock is the
// bucket's fullness after every change, and givers and takers running at
// once leave the count every unit accounts for (run with -race).
func TestRetryQuotaFullFlag(t *testing.T) {
	t.Parallel()
	q := newRetryQuota()
	t0 := time.Now()
	check := func(when string) {
		t.Helper()
		if q.full.Load() != (q.tokens == quotaCapacity) {
			t.Errorf("%s: full %v with %d tokens", when, q.full.Load(), q.tokens)
		}
	}
	check("new")
	q.give(t0, 1)
	check("a unit given to a full bucket")
	q.take(t0, false)
	check("a retry taken")
	q.give(t0, quotaRetryCost)
	check("the retry given back")

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if c := q.take(t0, false); c > 0 {
					q.give(t0, c)
				}
			}
		}()
	}
	wg.Wait()
	check("after takers giving back all they took")
	if q.tokens != quotaCapacity {
		t.Errorf("tokens %d, want %d: every unit taken was given back", q.tokens, quotaCapacity)
	}
}

// unavailableUntil returns a RoundTripper that answers 503 (or, with
// refuse, fails as a refused connection does) until end on the clock, then
// 201, and counts the attempts.
func unavailableUntil(end time.Time, refuse bool, sent *atomic.Int64) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent.Add(1)
		if req.Body != nil {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		code := http.StatusCreated
		if time.Now().Before(end) {
			if refuse {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			code = http.StatusServiceUnavailable
		}
		return &http.Response{StatusCode: code, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
	})
}

// TestDefaultsAcrossASustainedOutage: a default client carrying 100
// operations a second for 5s to a dependency that answers 503 to everything.
// The quota pays for 100 retries, then for one a second while the operations
// wait out the attempts it skips: at most 500 + 100 + one per second of the
// run, which ends within the cap, is 1.26 attempts per operation (target ≤
// 1.5). Every operation ends with ErrBudgetExhausted and the last status, or
// with the 503 when its last allowed retry was the one refused.
func TestDefaultsAcrossASustainedOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent atomic.Int64
		tr := NewTransport(unavailableUntil(time.Now().Add(time.Hour), false, &sent))
		start := time.Now()
		var wg sync.WaitGroup
		var odd atomic.Int64
		for i := range 500 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 10 * time.Millisecond)
				resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
				switch e := (*Error)(nil); {
				case err == nil && resp.StatusCode == http.StatusServiceUnavailable:
					_ = resp.Body.Close()
				case errors.As(err, &e) && errors.Is(err, ErrBudgetExhausted) && e.LastStatus == 503:
				default:
					odd.Add(1)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if n := odd.Load(); n != 0 {
			t.Errorf("%d operations ended otherwise than with the 503 or ErrBudgetExhausted", n)
		}
		if elapsed > 5*time.Second+30*time.Second {
			t.Errorf("the run took %v, want within 5s + the 30s cap", elapsed)
		}
		most := int64(500 + 100 + int(elapsed/time.Second) + 1)
		if n := sent.Load(); n < 600 || n > most {
			t.Errorf("500 operations made %d attempts over %v, want from 600 to %d", n, elapsed, most)
		}
		t.Logf("500 operations over 5s: %d attempts (%.2f each), the last operation ended after %v", sent.Load(), float64(sent.Load())/500, elapsed)
		if per := float64(sent.Load()) / 500; per > 1.5 {
			t.Errorf("%.2f attempts per operation, want at most 1.5", per)
		}
	})
}

// TestDefaultsRideOutAShortOutage: 50 operations start at once as a
// dependency goes down for 3s (every attempt answered 503, or refused), more
// than the quota's 100 retries carry through on their own. The operations
// whose retries the quota cannot pay for wait for their turns, so a default
// client completes at least 95% of them over five seeds of the jitter (a
// model of full jitter from 300ms over 7 turns: about 2% of schedules end
// before the dependency is back and the quota has paid for a turn), at least
// 90% in each run, and sends at most the quota's 100 retries and its one a
// second during the outage.
func TestDefaultsRideOutAShortOutage(t *testing.T) {
	t.Parallel()
	for _, refuse := range []bool{false, true} {
		var completed atomic.Int64
		for seed := range uint64(5) {
			synctest.Test(t, func(t *testing.T) {
				var sent, sentInOutage, done atomic.Int64
				end := time.Now().Add(3 * time.Second)
				var mu sync.Mutex
				rnd := rand.New(rand.NewPCG(seed, 1))
				tr := NewTransport(unavailableUntil(end, refuse, &sent))
				tr.rand = func() float64 { mu.Lock(); defer mu.Unlock(); return rnd.Float64() }
				var wg sync.WaitGroup
				for range 50 {
					wg.Go(func() {
						resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/", "{}"))
						if err == nil {
							_ = resp.Body.Close()
							if resp.StatusCode == http.StatusCreated {
								done.Add(1)
							}
						}
					})
				}
				time.Sleep(time.Until(end) - time.Nanosecond)
				sentInOutage.Store(sent.Load())
				wg.Wait()
				completed.Add(done.Load())
				t.Logf("refused %v, seed %d: %d of 50 completed, %d attempts during the outage, %d in all", refuse, seed, done.Load(), sentInOutage.Load(), sent.Load())
				if n := done.Load(); n < 45 {
					t.Errorf("refused %v, seed %d: %d of 50 operations completed across a 3s outage, want at least 45", refuse, seed, n)
				}
				if n := sentInOutage.Load(); n > 50+100+3 {
					t.Errorf("refused %v, seed %d: %d attempts during the outage, want at most 50 + 100 + 3 (the quota's retries and one a second)", refuse, seed, n)
				}
			})
		}
		if n := completed.Load(); n < 238 {
			t.Errorf("refused %v: %d of 250 operations completed over five runs, want at least 238 (95%%)", refuse, n)
		}
	}
}

// TestRetryQuotaRefills: answers refill the quota, and time, one unit every
// 200ms. An empty quota skips the retry; an operation answered at its first
// attempt gives 1 unit back, and one answered after a retry gives that
// retry's cost back.
func TestRetryQuotaRefills(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 200}}}
		var rep Report
		tr := NewTransport(f, noWait(), WithOnDone(func(_ context.Context, r Report) { rep = r }))
		q := tr.retryQuota(tr.policy())
		q.setTokens(3)
		q.at = time.Now()
		time.Sleep(250 * time.Millisecond) // one unit
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if q.tokens != 5 {
			t.Fatalf("tokens %d after 250ms and an answer at the first attempt, want 3+1+1 = 5", q.tokens)
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
		q.setTokens(4)
		_, err = tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrBudgetExhausted) || e.LastStatus != 503 {
			t.Fatalf("err %v, want an *Error with ErrBudgetExhausted and the last status 503", err)
		}
		if len(f.Calls()) != 1 || q.tokens != 4 || rep.Skipped != 6 || rep.Stop != "budget" || !rep.BudgetRefused {
			t.Errorf("%d attempts, tokens %d, report %+v; want 1 attempt, the 6 turns WithMaxAttempts allows skipped with no time passing (noWait), nothing given for a 503, Stop budget",
				len(f.Calls()), q.tokens, rep)
		}
	})
}

// TestRetryQuotaSkipKeepsTheSchedule: a retry the empty quota skips is waited
// out as if it had been made, and the next one is made when the quota can pay
// for it: with a backoff of 1s between attempts (no jitter) and an empty quota
// that will hold 4 units at 1s and 9 at 2s, the second attempt comes 2s after
// the first (its turn at 1s skipped), says it waited 2s, and the operation
// completes.
func TestRetryQuotaSkipKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}, {status: 200}}}
		var infos []AttemptInfo
		var rep Report
		tr := NewTransport(f, WithBackoff(time.Second, time.Second), WithJitter(NoJitter),
			WithOnRetry(func(_ context.Context, a AttemptInfo) { infos = append(infos, a) }),
			WithOnDone(func(_ context.Context, r Report) { rep = r }))
		q := tr.retryQuota(tr.policy())
		q.setTokens(0)
		q.at = time.Now().Add(200 * time.Millisecond) // a unit short of a retry at 1s
		start := time.Now()
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		calls := f.Calls()
		if len(calls) != 2 || resp.StatusCode != 200 {
			t.Fatalf("%d attempts, status %d; want 2, 200", len(calls), resp.StatusCode)
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("answered after %v, want 2s: the turn at 1s skipped (4 units), the one at 2s paid (9)", got)
		}
		if len(infos) != 1 || infos[0].Number != 2 || infos[0].Wait != 2*time.Second {
			t.Errorf("WithOnRetry saw %+v, want one retry, attempt 2, after a wait of 2s", infos)
		}
		if rep.Attempts != 2 || rep.Skipped != 1 || !rep.BudgetRefused || rep.Stop != "success" {
			t.Errorf("report %+v, want 2 attempts, 1 skipped, BudgetRefused, success", rep)
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
		q.setTokens(0)
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

// TestRetryQuotaCreditsOnlyAnswers: an operation that ends on a status the
// table retries earns the quota nothing, though its method or WithRetryIf
// kept it from retrying (an unkeyed POST's 503, a 503 the predicate made
// final), and WithRetryIf is asked once per attempt, not again when the
// operation settles with the quota. A 404 is an answer: 1 unit.
func TestRetryQuotaCreditsOnlyAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		method string
		status int
		opts   []Option
		want   int // tokens after, from 100
	}{
		{"an unkeyed POST's 503", http.MethodPost, 503, []Option{WithAutoKeys(false)}, 100},
		{"a 503 WithRetryIf made final", http.MethodGet, 503, []Option{WithRetryIf(func(*http.Response, error, bool) bool { return false })}, 100},
		{"a 404", http.MethodGet, 404, nil, 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeRT{steps: []fakeStep{{status: tc.status}}}
			tr := NewTransport(f, append([]Option{noWait()}, tc.opts...)...)
			q := tr.retryQuota(tr.policy())
			q.setTokens(100)
			q.at = time.Now().Add(time.Hour) // no unit earned by time during the test
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), tc.method, "http://x/", "{}"))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if q.tokens != tc.want || len(f.Calls()) != 1 {
				t.Errorf("%d attempts, tokens %d; want 1 attempt, %d", len(f.Calls()), q.tokens, tc.want)
			}
		})
	}
	t.Run("the predicate is asked once per attempt", func(t *testing.T) {
		t.Parallel()
		f := &fakeRT{steps: []fakeStep{{status: 503}, {status: 200}}}
		var asked atomic.Int64
		tr := NewTransport(f, noWait(), WithRetryIf(func(_ *http.Response, _ error, retryable bool) bool {
			asked.Add(1)
			return retryable
		}))
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if n := asked.Load(); n != 2 || len(f.Calls()) != 2 {
			t.Errorf("asked %d times over %d attempts, want 2 and 2", n, len(f.Calls()))
		}
	})
}

// TestRetryQuotaSkipUntilTheDeadline: when the time runs out while the empty
// quota pays for no turn, the error is a time-out, as at any other end by a
// deadline, and still says the quota: errors.Is ErrBudgetExhausted, Timeout
// true, Stop "deadline". Backoff 1s (no jitter), a 2s context deadline, the
// quota a unit short of a retry at 1s: the turn at 1s is skipped, and the
// next would end at the deadline.
func TestRetryQuotaSkipUntilTheDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}}}
		var rep Report
		tr := NewTransport(f, WithBackoff(time.Second, time.Second), WithJitter(NoJitter),
			WithOnDone(func(_ context.Context, r Report) { rep = r }))
		q := tr.retryQuota(tr.policy())
		q.setTokens(0)
		q.at = time.Now().Add(200 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodGet, "http://x/", ""))
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrBudgetExhausted) || !e.Timeout() || e.LastStatus != 503 {
			t.Fatalf("err %v, want an *Error with ErrBudgetExhausted, Timeout true and the last status 503", err)
		}
		if len(f.Calls()) != 1 || rep.Stop != "deadline" || rep.Skipped != 1 {
			t.Errorf("%d attempts, report %+v; want 1 attempt, Stop deadline, 1 turn skipped", len(f.Calls()), rep)
		}
	})
}
