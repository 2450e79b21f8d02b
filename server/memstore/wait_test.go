package memstore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/server"
)

// holdFirst claims req's key with a run that blocks until release is closed,
// then answers resp with keep (or panics when resp is nil and keep is false).
// It returns once the run has started, and the channel of the first Do's end.
func holdFirst(t *testing.T, s *Store, req server.Request, resp *server.Response, keep bool) (release chan struct{}, ended chan struct{}) {
	t.Helper()
	started, release, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		defer func() { _ = recover() }()
		_, _ = s.Do(context.Background(), req, func(context.Context) (*server.Response, bool) {
			close(started)
			<-release
			if resp == nil && !keep {
				panic("first run fails")
			}
			return resp, keep
		})
	}()
	<-started
	return release, ended
}

func TestWaitingDuplicate(t *testing.T) {
	t.Parallel()
	ok := &server.Response{Status: 201, Body: []byte("first")}
	failed := &server.Response{Status: 503, Body: []byte("down")}
	tests := []struct {
		name      string
		resp      *server.Response
		keep      bool
		want      server.Outcome
		wantBody  string
		wantSelfs int // runs of the duplicate's own run
	}{
		{"first records: replay", ok, true, server.OutcomeReplayed, "first", 0},
		{"first releases (5xx): the waiter runs", failed, false, server.OutcomeExecuted, "second", 1},
		{"first panics: the waiter runs", nil, false, server.OutcomeExecuted, "second", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := New()
				req := request("k", "fp")
				req.Wait = 10 * time.Second
				release, ended := holdFirst(t, s, req, tt.resp, tt.keep)
				go func() {
					time.Sleep(3 * time.Second) // fake time: the first finishes after 3 s
					close(release)
				}()
				start := time.Now()
				runs := 0
				res, err := s.Do(context.Background(), req, respond(&runs, &server.Response{Status: 201, Body: []byte("second")}, true))
				if err != nil || res.Outcome != tt.want || string(res.Response.Body) != tt.wantBody || runs != tt.wantSelfs {
					t.Fatalf("duplicate = %v %v %q, %d runs; want %v %q, %d", res.Outcome, err, bodyOf(res), runs, tt.want, tt.wantBody, tt.wantSelfs)
				}
				if waited := time.Since(start); waited != 3*time.Second || res.Waited != 3*time.Second {
					t.Errorf("duplicate answered after %v, Waited %v; want both when the first finished (3s)", waited, res.Waited)
				}
				<-ended
			})
		})
	}
}

func TestWaitEnds(t *testing.T) {
	t.Parallel()
	t.Run("after Request.Wait, in progress with the lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			req := request("k", "fp")
			release, ended := holdFirst(t, s, req, &server.Response{Status: 201}, true)
			defer func() { close(release); <-ended }()
			req.Wait = 2 * time.Second
			start := time.Now()
			runs := 0
			res := mustDo(t, s, req, respond(&runs, nil, false))
			if res.Outcome != server.OutcomeInProgress || runs != 0 || time.Since(start) != 2*time.Second {
				t.Fatalf("got %v after %v with %d runs, want in progress after the 2s wait", res.Outcome, time.Since(start), runs)
			}
			if res.Waited != 2*time.Second {
				t.Errorf("Waited = %v, want the 2s wait", res.Waited)
			}
			if res.RetryAfter <= 0 || res.RetryAfter > req.LockTTL {
				t.Errorf("RetryAfter = %v, want within the %v lease", res.RetryAfter, req.LockTTL)
			}
		})
	})
	t.Run("when the client leaves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			req := request("k", "fp")
			release, ended := holdFirst(t, s, req, &server.Response{Status: 201}, true)
			defer func() { close(release); <-ended }()
			req.Wait = time.Minute
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(500 * time.Millisecond)
				cancel()
			}()
			start := time.Now()
			runs := 0
			res, err := s.Do(ctx, req, respond(&runs, nil, false))
			if err != nil || res.Outcome != server.OutcomeInProgress || runs != 0 || time.Since(start) != 500*time.Millisecond {
				t.Fatalf("got %v %v after %v, want in progress at the cancellation (500ms)", res.Outcome, err, time.Since(start))
			}
			if res.Waited != 500*time.Millisecond {
				t.Errorf("Waited = %v, want until the cancellation (500ms)", res.Waited)
			}
		})
	})
	t.Run("zero Wait answers at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			req := request("k", "fp")
			release, ended := holdFirst(t, s, req, &server.Response{Status: 201}, true)
			defer func() { close(release); <-ended }()
			start := time.Now()
			runs := 0
			if res := mustDo(t, s, req, respond(&runs, nil, false)); res.Outcome != server.OutcomeInProgress || time.Since(start) != 0 || res.Waited != 0 {
				t.Fatalf("got %v after %v, Waited %v; want in progress at once, no wait", res.Outcome, time.Since(start), res.Waited)
			}
		})
	})
	t.Run("a mismatch does not wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			release, ended := holdFirst(t, s, request("k", "fp"), &server.Response{Status: 201}, true)
			defer func() { close(release); <-ended }()
			req := request("k", "other")
			req.Wait = time.Minute
			runs := 0
			start := time.Now()
			if res := mustDo(t, s, req, respond(&runs, nil, false)); res.Outcome != server.OutcomeMismatch || time.Since(start) != 0 {
				t.Fatalf("got %v after %v, want a mismatch at once", res.Outcome, time.Since(start))
			}
		})
	})
}

func bodyOf(res server.Result) string {
	if res.Response == nil {
		return ""
	}
	return string(res.Response.Body)
}

// TestWaitingDuplicatesTakeATurn: a duplicate waits only with a turn from
// the process's Limits (server.WaitTurn); past server.LimitWaiting it is
// answered 409 at once, not after the in-progress wait.
func TestWaitingDuplicatesTakeATurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := New()
		lim := server.NewLimits(server.LimitWaiting(1), server.LimitRequestTime(0))
		release := make(chan struct{})
		var waited []time.Duration
		var mu sync.Mutex
		h := server.Middleware(s, server.WithLimits(lim), server.WithInProgressWait(10*time.Second),
			server.WithOnOutcome(func(ev server.OutcomeEvent) {
				mu.Lock()
				waited = append(waited, ev.Waited)
				mu.Unlock()
			}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			w.WriteHeader(http.StatusCreated)
		}))
		post := func() int {
			r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
			r.Header.Set(server.HeaderKey, "k")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			return rec.Code
		}
		codes := make(chan int, 3)
		go func() { codes <- post() }() // the first: runs, held
		synctest.Wait()
		go func() { codes <- post() }() // takes the one turn and waits
		synctest.Wait()
		if n := lim.Waiting(); n != 1 {
			t.Fatalf("Waiting() = %d with one duplicate waiting, want 1", n)
		}
		if code := post(); code != http.StatusConflict { // no turn left: at once
			t.Errorf("a duplicate past the bound got %d, want 409", code)
		}
		close(release)
		for range 2 {
			if code := <-codes; code != http.StatusCreated {
				t.Errorf("status %d, want 201 (the first, and the waiter's replay)", code)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if waited[0] != 0 {
			t.Errorf("the duplicate past the bound waited %v, want 0", waited[0])
		}
		if lim.Waiting() != 0 {
			t.Errorf("Waiting() = %d at the end, want 0", lim.Waiting())
		}
	})
}
