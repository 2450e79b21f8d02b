package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// observer wraps the store under test and counts what its Do calls returned,
// so that scenarios can wait for "the duplicate was told in progress" or "the
// first request's Do returned" without sleeping.
type observer struct {
	store server.Store

	mu      sync.Mutex
	counts  counts
	changed chan struct{} // closed and replaced on every change
}

// counts is what the observer saw.
type counts struct {
	calls    int // Do calls started
	returned int // Do calls returned
	errors   int
	outcomes map[server.Outcome]int
	// inProgressRetryAfter lists the RetryAfter of every in-progress Result.
	inProgressRetryAfter []time.Duration
	// waited lists, by outcome, the Waited of every Result that reports a wait.
	waited map[server.Outcome][]time.Duration
}

func newObserver(s server.Store) *observer {
	return &observer{store: s, changed: make(chan struct{}), counts: counts{outcomes: map[server.Outcome]int{},
		waited: map[server.Outcome][]time.Duration{}}}
}

// Do implements server.Store.
func (o *observer) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	o.update(func(c *counts) { c.calls++ })
	res, err := o.store.Do(ctx, req, run)
	o.update(func(c *counts) {
		c.returned++
		if err != nil {
			c.errors++
		} else {
			c.outcomes[res.Outcome]++
			if res.Outcome == server.OutcomeInProgress {
				c.inProgressRetryAfter = append(c.inProgressRetryAfter, res.RetryAfter)
			}
			if res.Waited != 0 {
				c.waited[res.Outcome] = append(c.waited[res.Outcome], res.Waited)
			}
		}
	})
	return res, err
}

func (o *observer) update(f func(*counts)) {
	o.mu.Lock()
	f(&o.counts)
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
}

// snapshot returns a copy of the counts.
func (o *observer) snapshot() counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.counts
	c.outcomes = make(map[server.Outcome]int, len(o.counts.outcomes))
	for k, v := range o.counts.outcomes {
		c.outcomes[k] = v
	}
	c.inProgressRetryAfter = slices.Clone(o.counts.inProgressRetryAfter)
	c.waited = make(map[server.Outcome][]time.Duration, len(o.counts.waited))
	for k, v := range o.counts.waited {
		c.waited[k] = slices.Clone(v)
	}
	return c
}

// current returns the counts and a channel closed at the next change.
func (o *observer) current() (counts, <-chan struct{}) {
	o.mu.Lock()
	ch := o.changed
	o.mu.Unlock()
	return o.snapshot(), ch
}

// waitUntil blocks until cond holds for the counts, failing the test after
// waitLimit.
func (o *observer) waitUntil(t *testing.T, what string, cond func(c counts) bool) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		ok, ch := cond(o.counts), o.changed
		o.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting until %s (store saw %+v)", waitLimit, what, o.snapshot())
		}
	}
}
