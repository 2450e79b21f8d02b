package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// TestConcurrentDuplicatesRunOnce starts 100 goroutines on one key at once.
// The one that claims it holds its handler until the 99 others have answered,
// so each of them must have seen the claim: exactly one run, 99 in progress.
// A second wave after the record is written replays it 100 times.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	const n = 100
	s := New()
	req := request("one-key", "fp")
	var (
		runs        atomic.Int32
		answered    atomic.Int32
		allAnswered = make(chan struct{})
		start       = make(chan struct{})
		wg          sync.WaitGroup
		results     = make([]server.Result, n)
	)
	run := func(context.Context) (*server.Response, bool) {
		runs.Add(1)
		select {
		case <-allAnswered:
		case <-time.After(10 * time.Second): // failure bound only: a second run never unblocks
			t.Error("the other callers did not all answer while the claim was held")
		}
		return sampleResponse(), true
	}
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := s.Do(context.Background(), req, run)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
			if res.Outcome != server.OutcomeExecuted && answered.Add(1) == n-1 {
				close(allAnswered)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := runs.Load(); got != 1 {
		t.Fatalf("runs = %d, want 1", got)
	}
	count := map[server.Outcome]int{}
	for _, r := range results {
		count[r.Outcome]++
		if r.Outcome == server.OutcomeInProgress && r.RetryAfter <= 0 {
			t.Errorf("in progress without RetryAfter: %+v", r)
		}
	}
	if count[server.OutcomeExecuted] != 1 || count[server.OutcomeInProgress] != n-1 {
		t.Fatalf("outcomes = %v", count)
	}

	want := sampleResponse()
	for i := range n {
		wg.Go(func() {
			res, err := s.Do(context.Background(), req, run)
			if err != nil || res.Outcome != server.OutcomeReplayed || !reflect.DeepEqual(res.Response, want) {
				t.Errorf("wave 2 caller %d: %v %+v", i, err, res)
			}
		})
	}
	wg.Wait()
	if got := runs.Load(); got != 1 {
		t.Fatalf("runs after replays = %d, want 1", got)
	}
}

// TestConcurrentStress mixes keys, scopes, releases, panics, expiry and a full
// store across goroutines and checks that no key ever has two handlers running
// at once and that the accounting matches the maps afterwards.
func TestConcurrentStress(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := New(WithClock(clock.Now), WithMaxEntries(24))
	var running [2][40]atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 400 {
				scope, key := r.IntN(2), r.IntN(40)
				req := server.Request{
					Scope: fmt.Sprint("s", scope), Key: fmt.Sprint("k", key),
					Fingerprint: fmt.Sprint(r.IntN(2)), TTL: time.Duration(1+r.IntN(5)) * time.Second, LockTTL: time.Second,
				}
				mode := r.IntN(10)
				func() {
					defer func() {
						if p := recover(); p != nil && p != "stress panic" {
							panic(p)
						}
					}()
					_, err := s.Do(context.Background(), req, func(context.Context) (*server.Response, bool) {
						if running[scope][key].Add(1) != 1 {
							t.Errorf("two handlers running for %s/%s", req.Scope, req.Key)
						}
						defer running[scope][key].Add(-1)
						switch mode {
						case 0:
							panic("stress panic")
						case 1:
							return sampleResponse(), false
						}
						return sampleResponse(), true
					})
					if err != nil && !errors.Is(err, ErrFull) && !errors.Is(err, ErrScopeFull) {
						t.Errorf("Do: %v", err)
					}
				}()
				if r.IntN(20) == 0 {
					clock.Advance(time.Second)
				}
			}
		})
	}
	wg.Wait()
	if got, want := s.countEntries(), s.Stats().Entries; got != want {
		t.Errorf("entries in maps = %d, Stats().Entries = %d", got, want)
	}
	if got, want := s.sumCosts(), s.Stats().Bytes; got != want {
		t.Errorf("bytes of the entries in maps = %d, Stats().Bytes = %d", got, want)
	}
	for i := range s.scopes { // every scope's usage is what its entries cost
		ss := &s.scopes[i]
		ss.mu.Lock()
		for scope, u := range ss.m {
			if u.entries <= 0 {
				t.Errorf("scope %q kept in the table with %d entries", scope, u.entries)
			}
		}
		ss.mu.Unlock()
	}
	if s.Stats().Entries > 24 {
		t.Errorf("entries %d above the bound", s.Stats().Entries)
	}
}
