package server

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedStore answers InProgress until done is closed, then replays.
type scriptedStore struct {
	mu    sync.Mutex
	calls int
	when  []time.Duration // time since start of each call
	start time.Time
	done  chan struct{}
	stuck bool // never finishes
}

func (s *scriptedStore) Do(ctx context.Context, _ Request, _ RunFunc) (Result, error) {
	s.mu.Lock()
	s.calls++
	s.when = append(s.when, time.Since(s.start))
	s.mu.Unlock()
	select {
	case <-s.done:
		return Result{Outcome: OutcomeReplayed, Response: &Response{Status: 201, Body: []byte("first")}}, nil
	default:
		return Result{Outcome: OutcomeInProgress, RetryAfter: 5 * time.Second}, nil
	}
}

func TestInProgressWait(t *testing.T) {
	t.Parallel()
	t.Run("replays once the first finishes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &scriptedStore{start: time.Now(), done: make(chan struct{})}
			mw := Middleware(s, WithInProgressWait(10*time.Second))(counting(created))
			go func() {
				time.Sleep(65 * time.Millisecond) // fake time: the first request finishes
				close(s.done)
			}()
			rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
			if rec.Code != 201 || rec.Body.String() != "first" || rec.Header().Get(HeaderReplayed) != "true" {
				t.Fatalf("got %d %q, want the replay", rec.Code, rec.Body)
			}
			// Polls at 0, 10, 30, 70 ms (backoff 10, 20, 40 ms): the fourth sees the record.
			want := []time.Duration{0, 10 * time.Millisecond, 30 * time.Millisecond, 70 * time.Millisecond}
			if len(s.when) != len(want) {
				t.Fatalf("store asked at %v, want %v", s.when, want)
			}
			for i := range want {
				if s.when[i] != want[i] {
					t.Fatalf("store asked at %v, want %v", s.when, want)
				}
			}
		})
	})
	t.Run("gives up after the wait with 409", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &scriptedStore{start: time.Now(), done: make(chan struct{})}
			mw := Middleware(s, WithInProgressWait(time.Second))(counting(created))
			rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
			checkProblem(t, rec, http.StatusConflict, ProblemInProgress)
			if got := time.Since(s.start); got != time.Second {
				t.Errorf("answered after %v, want exactly the 1s wait", got)
			}
			if rec.Header().Get("Retry-After") != "5" {
				t.Errorf("Retry-After %q, want the store's 5", rec.Header().Get("Retry-After"))
			}
			// 0, 10, 30, 70, 150, 310, 510, 710, 910 ms, and a last poll at 1s.
			if s.calls != 10 {
				t.Errorf("store asked %d times at %v, want 10", s.calls, s.when)
			}
		})
	})
	t.Run("stops when the client leaves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &scriptedStore{start: time.Now(), done: make(chan struct{})}
			mw := Middleware(s, WithInProgressWait(time.Minute))(counting(created))
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(25 * time.Millisecond)
				cancel()
			}()
			rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k").WithContext(ctx))
			checkProblem(t, rec, http.StatusConflict, ProblemInProgress)
			if got := time.Since(s.start); got != 25*time.Millisecond {
				t.Errorf("answered after %v, want at the cancellation", got)
			}
		})
	})
	t.Run("executes when the first released its claim", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			polls := 0
			store := &fakeStore{do: func(ctx context.Context, _ Request, run RunFunc) (Result, error) {
				if polls++; polls < 3 {
					return Result{Outcome: OutcomeInProgress}, nil
				}
				resp, _ := run(ctx)
				return Result{Outcome: OutcomeExecuted, Response: resp}, nil
			}}
			h := counting(created)
			rec := serve(Middleware(store, WithInProgressWait(time.Second))(h), request("POST", "/x", "{}", HeaderKey, "k"))
			if rec.Code != 201 || rec.Header().Get(HeaderReplayed) != "" || h.runs.Load() != 1 {
				t.Fatalf("got %d replayed=%q runs=%d, want one execution", rec.Code, rec.Header().Get(HeaderReplayed), h.runs.Load())
			}
		})
	})
}

func TestPollDelay(t *testing.T) {
	t.Parallel()
	want := []time.Duration{10, 20, 40, 80, 160, 200, 200, 200}
	for n, w := range want {
		if got := pollDelay(n); got != w*time.Millisecond {
			t.Errorf("pollDelay(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := pollDelay(1 << 20); got != 200*time.Millisecond {
		t.Errorf("pollDelay(huge) = %v", got)
	}
}
