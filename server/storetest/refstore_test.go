package storetest_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// flaw is a deliberate defect of refStore, to prove that the suite catches it.
type flaw string

const (
	sound         flaw = ""
	ignoresClaims flaw = "ignores-claims" // runs every request, even during another's claim
	neverRecords  flaw = "never-records"  // runs every request, records nothing
	keepsFailures flaw = "keeps-failures" // records responses that run said not to keep
	ignoresScope  flaw = "ignores-scope"  // one namespace for every scope
	neverExpires  flaw = "never-expires"  // ignores the TTL
	neverWaits    flaw = "never-waits"    // ignores Request.Wait: answers in progress at once
	waitsForever  flaw = "waits-forever"  // waits out Request.Wait even when the client left
	releasesLost  flaw = "releases-lost"  // releases a claim whose response it could not record
	hidesWait     flaw = "hides-wait"     // waits, but never says so in Result.Waited
	ignoresMarks  flaw = "ignores-marks"  // accepts BeginEffect's mark and forgets it
	ignoresTurns  flaw = "ignores-turns"  // waits without a turn of server.WaitTurn
)

// refStore is a small, obviously correct in-memory Store (unless given a
// flaw), on a fake clock. It keeps a claim for as long as run runs.
type refStore struct {
	flaw flaw
	// broken makes the next record fail (see breakRecord).
	broken bool

	mu    sync.Mutex
	now   time.Time
	next  uint64
	items map[[2]string]*item
}

type item struct {
	fingerprint string
	owner       uint64 // non-zero while claimed
	resp        *server.Response
	expires     time.Time
	done        chan struct{} // closed when the claim is recorded or released
	unknown     bool          // the run's response could not be recorded
	marked      bool          // the run began its effect (server.BeginEffect)
}

func newRefStore(f flaw) *refStore {
	return &refStore{flaw: f, now: time.Unix(1_700_000_000, 0), items: map[[2]string]*item{}}
}

func (s *refStore) advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	s.mu.Unlock()
}

func (s *refStore) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	wait := req.Wait
	if s.flaw == neverWaits {
		wait = 0
	}
	waitOver := time.After(wait)
	var waitStart time.Time // the first time the key was found claimed
	var waited time.Duration
	report := func(res server.Result) server.Result {
		if s.flaw != hidesWait {
			res.Waited = waited
		}
		return res
	}
	for {
		res, done, err := s.try(ctx, req, run, wait > 0)
		if done == nil {
			return report(res), err
		}
		if waitStart.IsZero() {
			if s.flaw != ignoresTurns {
				turnDone, ok := server.WaitTurn(ctx)
				if !ok { // as many duplicates wait as the process allows
					return report(server.Result{Outcome: server.OutcomeInProgress, RetryAfter: req.LockTTL}), nil
				}
				defer turnDone()
			}
			waitStart = time.Now()
		}
		stop := ctx.Done()
		if s.flaw == waitsForever {
			stop = nil
		}
		select {
		case <-done:
		case <-waitOver:
			wait = 0
		case <-stop:
			waited = time.Since(waitStart)
			return report(server.Result{Outcome: server.OutcomeInProgress, RetryAfter: req.LockTTL}), nil
		}
		waited = time.Since(waitStart)
	}
}

// try answers, claims and runs, or, when mayWait and the key is claimed,
// returns the claim's done channel to wait on.
func (s *refStore) try(ctx context.Context, req server.Request, run server.RunFunc, mayWait bool) (server.Result, <-chan struct{}, error) {
	k := [2]string{req.Scope, req.Key}
	if s.flaw == ignoresScope {
		k[0] = ""
	}
	s.mu.Lock()
	it := s.items[k]
	if it != nil && it.owner == 0 && !s.now.Before(it.expires) && s.flaw != neverExpires {
		delete(s.items, k)
		it = nil
	}
	switch {
	case it != nil && it.unknown:
		s.mu.Unlock()
		return server.Result{Outcome: server.OutcomeUnknown}, nil, nil
	case it != nil && it.fingerprint != req.Fingerprint:
		s.mu.Unlock()
		return server.Result{Outcome: server.OutcomeMismatch}, nil, nil
	case it != nil && it.owner != 0 && s.flaw != ignoresClaims && mayWait:
		s.mu.Unlock()
		return server.Result{}, it.done, nil
	case it != nil && it.owner != 0 && s.flaw != ignoresClaims:
		s.mu.Unlock()
		return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: req.LockTTL}, nil, nil
	case it != nil && it.owner == 0:
		resp := clone(it.resp)
		s.mu.Unlock()
		return server.Result{Outcome: server.OutcomeReplayed, Response: resp}, nil, nil
	}
	s.next++
	token := s.next
	if s.flaw != ignoresClaims || it == nil {
		s.items[k] = &item{fingerprint: req.Fingerprint, owner: token, done: make(chan struct{})}
	}
	s.mu.Unlock()

	done := false
	defer func() {
		if !done { // run panicked: release, let the panic go on
			s.finish(k, token, nil, false, 0)
		}
	}()
	resp, keep := run(server.ContextWithEffectMark(ctx, func(context.Context) error {
		s.mark(k, token)
		return nil
	}))
	done = true
	if err := s.finish(k, token, resp, keep, req.TTL); err != nil {
		return server.Result{}, nil, err
	}
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil, nil
}

// mark records that token's run began its effect (a compare-and-set on the
// owner), unless the store ignoresMarks.
func (s *refStore) mark(k [2]string, token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items[k]; it != nil && it.owner == token && s.flaw != ignoresMarks {
		it.marked = true
	}
}

// ownerGone stands for a crash of the process that runs the claims in
// progress, and for the store seeing it at once: a marked claim becomes
// outcome unknown for the record's TTL (the suite's: an hour is plenty), an
// unmarked one is released. The owner's own finish then changes nothing (it
// no longer owns the key). The same store serves the retries.
func (s *refStore) ownerGone(*testing.T, context.Context) server.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, it := range s.items {
		if it.owner == 0 {
			continue
		}
		close(it.done)
		if !it.marked {
			delete(s.items, k)
			continue
		}
		it.owner, it.unknown, it.expires = 0, true, s.now.Add(time.Hour)
	}
	return s
}

// breakRecord makes the next record fail, until repaired.
func (s *refStore) breakRecord(*testing.T) func() {
	s.mu.Lock()
	s.broken = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.broken = false
		s.mu.Unlock()
	}
}

// finish records or releases token's claim (a compare-and-set on the owner).
// A broken store cannot record: it marks the key outcome unknown (or, with
// the releasesLost flaw, releases it) and returns ErrNotRecorded.
func (s *refStore) finish(k [2]string, token uint64, resp *server.Response, keep bool, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[k]
	if s.flaw == ignoresClaims && it != nil && it.owner != token && it.owner != 0 {
		it.owner = token // the flaw: last writer wins
	}
	if it == nil || it.owner != token {
		return nil
	}
	close(it.done)
	if s.broken && keep && resp != nil {
		if s.flaw == releasesLost {
			delete(s.items, k)
		} else {
			it.owner, it.unknown, it.expires = 0, true, s.now.Add(ttl)
		}
		return fmt.Errorf("refstore: cannot record: %w", server.ErrNotRecorded)
	}
	if s.flaw == neverRecords || (!keep && s.flaw != keepsFailures) || resp == nil {
		delete(s.items, k)
		return nil
	}
	it.owner, it.resp, it.expires = 0, clone(resp), s.now.Add(ttl)
	return nil
}

func clone(r *server.Response) *server.Response {
	h := make(http.Header, len(r.Header))
	for k, v := range r.Header {
		h[k] = slices.Clone(v)
	}
	return &server.Response{Status: r.Status, Header: h, Body: slices.Clone(r.Body)}
}
