package idemgrpc

import (
	"context"
	"testing"
	"time"
)

// deadlineOnly is a context whose deadline is set and whose Err is still
// nil: an attempt whose deadline has passed before its timer has run.
type deadlineOnly struct {
	context.Context
	d time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.d, true }

// An attempt is cut by its bound once its own deadline has passed, even
// before its context's timer runs (a server may answer DeadlineExceeded for
// the deadline it was sent first: TestClientAttemptTimeout, on a loaded
// machine, saw reason "status"); not when the deadline is the caller's.
func TestBoundPassed(t *testing.T) {
	now := time.Now()
	bg := context.Background()
	callerLater := deadlineOnly{bg, now.Add(time.Hour)}
	cases := []struct {
		name            string
		attempt, caller context.Context
		want            bool
	}{
		{"passed, no caller deadline", deadlineOnly{bg, now.Add(-time.Millisecond)}, bg, true},
		{"passed, the caller's later", deadlineOnly{bg, now.Add(-time.Millisecond)}, callerLater, true},
		{"not yet", deadlineOnly{bg, now.Add(time.Hour)}, bg, false},
		{"the caller's own deadline", deadlineOnly{bg, now.Add(-time.Millisecond)}, deadlineOnly{bg, now.Add(-time.Millisecond)}, false},
	}
	for _, c := range cases {
		if got := boundPassed(c.attempt, c.caller); got != c.want {
			t.Errorf("%s: boundPassed = %v, want %v", c.name, got, c.want)
		}
	}
}
