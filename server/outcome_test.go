package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestOnOutcomeEvents(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	var events []OutcomeEvent
	fail := true
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") != "" && fail {
			fail = false
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		created(w, r)
	})
	mw := Middleware(store, WithOnOutcome(func(e OutcomeEvent) { events = append(events, e) }))(h)
	serve(mw, request("POST", "/x", "{}", HeaderKey, "a"))
	serve(mw, request("POST", "/x", "{}", HeaderKey, "a"))
	serve(mw, request("POST", "/x", "{1}", HeaderKey, "a"))
	serve(mw, request("POST", "/x", "{}", HeaderKey, "b", "X-Fail", "1"))
	serve(mw, request("GET", "/x", "", HeaderKey, "c")) // not protected: no event

	want := []OutcomeEvent{
		{Key: "a", Outcome: OutcomeExecuted, Status: 201, Stored: true},
		{Key: "a", Outcome: OutcomeReplayed, Status: 201},
		{Key: "a", Outcome: OutcomeMismatch, Status: 422, Problem: ProblemMismatch},
		{Key: "b", Outcome: OutcomeExecuted, Status: 502, Stored: false},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		e := events[i]
		if e.Request == nil || e.Key != w.Key || e.Outcome != w.Outcome || e.Status != w.Status ||
			e.Problem != w.Problem || e.Stored != w.Stored || e.Err != nil || e.Panic != nil {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
}

// TestLogKey: a key logged is bounded and printable (issue 12: a 900 KB key
// became a 900 KB log line).
func TestLogKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 900_000)
	tests := []struct{ in, want string }{
		{"", ""},
		{"order-42", "order-42"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{long, strings.Repeat("k", 64) + "...(900000 bytes)"},
		{"a\r\nb c\x00é", "a??b?c???"},
	}
	for _, tt := range tests {
		if got := LogKey(tt.in); got != tt.want {
			t.Errorf("LogKey(%.20q) = %.80q, want %.80q", tt.in, got, tt.want)
		}
	}
}

// TestOnOutcomeDurations: the event says how long the handler ran, how long
// the store took besides (a duplicate's wait is store time) and how long the
// store waited for another request with the key (a replay's, and an
// execution's after the first request released the key), on the bubble's
// fake clock.
func TestOnOutcomeDurations(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{do: func(ctx context.Context, req Request, run RunFunc) (Result, error) {
			time.Sleep(2 * time.Second) // the claim
			var waited time.Duration
			switch req.Key {
			case "dup":
				time.Sleep(5 * time.Second) // a duplicate waits, then gets the replay
				return Result{Outcome: OutcomeReplayed, Response: &Response{Status: 201}, Waited: 5 * time.Second}, nil
			case "dup-runs":
				time.Sleep(4 * time.Second) // a duplicate waits; the first releases the key
				waited = 4 * time.Second
			}
			resp, _ := run(ctx)
			time.Sleep(time.Second) // the record
			return Result{Outcome: OutcomeExecuted, Response: resp, Waited: waited}, nil
		}}
		var events []OutcomeEvent
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(3 * time.Second)
			w.WriteHeader(http.StatusCreated)
		})
		mw := Middleware(store, WithOnOutcome(func(e OutcomeEvent) { events = append(events, e) }))(h)
		serve(mw, request("POST", "/x", "{}", HeaderKey, "first"))
		serve(mw, request("POST", "/x", "{}", HeaderKey, "dup"))
		serve(mw, request("POST", "/x", "{}", HeaderKey, "dup-runs"))
		serve(mw, request("POST", "/x", "{}")) // no key: the store is not asked

		want := []struct{ handler, store, waited time.Duration }{
			{3 * time.Second, 3 * time.Second, 0},
			{0, 7 * time.Second, 5 * time.Second},
			{3 * time.Second, 7 * time.Second, 4 * time.Second},
			{0, 0, 0},
		}
		if len(events) != len(want) {
			t.Fatalf("%d events, want %d", len(events), len(want))
		}
		for i, w := range want {
			if e := events[i]; e.HandlerDuration != w.handler || e.StoreDuration != w.store || e.Waited != w.waited {
				t.Errorf("event %d: handler %v, store %v, waited %v; want %v, %v, %v", i,
					e.HandlerDuration, e.StoreDuration, e.Waited, w.handler, w.store, w.waited)
			}
		}
	})
}
