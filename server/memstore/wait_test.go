package memstore

import (
	"context"
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
