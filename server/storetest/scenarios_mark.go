package storetest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// markLockTTL is the lock TTL of the owner-gone scenarios: a store whose
// claims expire (Redis) lets a retry act once it and the grace after it have
// passed, so it is short; the retry's wait (the middleware's, 5 s) covers it.
const markLockTTL = 500 * time.Millisecond

// testMarkThenRecord: a handler that begins its effect (server.BeginEffect)
// and answers 201 has it recorded over the mark: the retry replays it.
func testMarkThenRecord(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(9200)
	e.setBeforeWrite(func(r *http.Request) error { return beginEffect(t, r) })
	first := e.post(body, withKey("mark-record-1"))
	wantExecuted(t, first, "request that began its effect")
	wantReplayOf(t, e.post(body, withKey("mark-record-1")), first, "retry after the recorded answer")
	e.wantEffects(1)
}

// testMarkCancelled: a handler that begins its effect, then cancels it
// (server.CancelEffect: nothing left) and answers 503 has the key released,
// the mark with it: the retry runs the handler, once.
func testMarkCancelled(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(9300)
	var once sync.Once
	e.setBeforeWrite(func(r *http.Request) error {
		if err := beginEffect(t, r); err != nil {
			return err
		}
		var err error
		once.Do(func() {
			server.CancelEffect(r.Context())
			err = errors.New("the upstream refused the connection: nothing was sent")
		})
		return err
	})
	failed := e.post(body, withKey("mark-cancel-1"))
	if failed.Err != nil || failed.Status != http.StatusServiceUnavailable || failed.replayed() {
		t.Fatalf("first request: got %v, want the handler's own 503", failed)
	}
	e.wantEffects(0)
	ok := e.post(body, withKey("mark-cancel-1"))
	wantExecuted(t, ok, "retry after the cancelled effect's 503")
	wantReplayOf(t, e.post(body, withKey("mark-cancel-1")), ok, "retry after the success")
	e.wantEffects(1)
}

// testMarkDuplicate: while the owner of a marked claim lives, a duplicate is
// answered in progress (409 here: no wait), as for any claim; once the owner
// records, the duplicate replays.
func testMarkDuplicate(t *testing.T, f Fixture) {
	e := newEnv(t, f, server.WithInProgressWait(0))
	body := e.body(9400)
	entered, release := e.newGate(), e.newGate()
	var once sync.Once
	e.setBeforeWrite(func(r *http.Request) error {
		if err := beginEffect(t, r); err != nil {
			return err
		}
		once.Do(func() {
			entered.open()
			<-release.ch
		})
		return nil
	})
	done := make(chan reply, 1)
	go func() { done <- e.post(body, withKey("mark-dup-1")) }()
	entered.wait(t, "the first request to begin its effect")
	dup := e.post(body, withKey("mark-dup-1"))
	wantProblem(t, dup, http.StatusConflict, server.ProblemInProgress, "duplicate while the marked owner runs")
	release.open()
	first := <-done
	wantExecuted(t, first, "the marked owner")
	wantReplayOf(t, e.post(body, withKey("mark-dup-1")), first, "duplicate after the owner recorded")
	e.wantEffects(1)
}

// testMarkOwnerGone: the owner of a marked claim is gone (Fixture.OwnerGone:
// its process crashed after BeginEffect and the effect, before the record).
// The effect lives outside the store (an upstream's), so it stands: every
// retry gets the outcome-unknown problem, never a second run.
func testMarkOwnerGone(t *testing.T, f Fixture) {
	testOwnerGone(t, f, true)
}

// testUnmarkedOwnerGone is testMarkOwnerGone's control: the same crash
// without BeginEffect frees the key (a transaction rolled back, a lease
// lapsed), and the retry runs the effect a second time. That is the crash
// window the mark closes, and the proof that the fixture's OwnerGone does
// make the owner gone.
func testUnmarkedOwnerGone(t *testing.T, f Fixture) {
	testOwnerGone(t, f, false)
}

func testOwnerGone(t *testing.T, f Fixture, marked bool) {
	if f.OwnerGone == nil {
		t.Skip("the fixture cannot make a claim's owner gone (Fixture.OwnerGone): a store that makes no durable effect mark " +
			"(memstore: a crash loses every record with the process) has nothing to test here")
	}
	f.Effects = newMemEffects() // an effect outside the store's transaction, as an upstream's is
	e := newEnv(t, f, server.WithLockTTL(markLockTTL))
	body := e.body(9500)
	gone, hold := e.newGate(), e.newGate()
	var (
		once     sync.Once
		mu       sync.Mutex
		survivor server.Store
	)
	if marked {
		e.setBeforeWrite(func(r *http.Request) error { return beginEffect(t, r) })
	}
	e.setAfterWrite(func(r *http.Request) {
		once.Do(func() {
			s := f.OwnerGone(t, r.Context())
			mu.Lock()
			survivor = s
			mu.Unlock()
			gone.open()
			<-hold.ch // a crashed process never answers
		})
	})
	go func() { _ = e.post(body, withKey("gone-1")) }() // its answer is the crashed process's: none to check
	gone.wait(t, "the owner to be gone")
	t.Cleanup(hold.open)
	mu.Lock()
	f.Store = survivor
	mu.Unlock()
	if f.Store == nil {
		t.Fatal("Fixture.OwnerGone returned a nil Store")
	}
	after := newEnv(t, f, server.WithLockTTL(markLockTTL)) // the restarted process
	after.op = e.op
	retry := after.postUntilAnswered(body, withKey("gone-1"))
	if !marked {
		wantExecuted(t, retry, "retry after the unmarked owner is gone")
		e.wantEffects(2)
		return
	}
	wantProblem(t, retry, http.StatusInternalServerError, server.ProblemOutcomeUnknown, "retry after the marked owner is gone")
	wantProblem(t, after.post(body, withKey("gone-1")), http.StatusInternalServerError, server.ProblemOutcomeUnknown,
		"second retry after the marked owner is gone")
	e.wantEffects(1)
}

// beginEffect calls server.BeginEffect for the suite handler, failing the
// test if it fails.
func beginEffect(t *testing.T, r *http.Request) error {
	if err := server.BeginEffect(r.Context()); err != nil {
		t.Errorf("server.BeginEffect: %v", err)
		return err
	}
	return nil
}

// postUntilAnswered posts until the answer is not 409 (the first owner's
// claim, which the store still holds until the owner is known to be gone),
// for at most waitLimit: each attempt waits on the store (Request.Wait), so
// this is no busy loop.
func (e *env) postUntilAnswered(body string, opts ...reqOpt) reply {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for {
		r := e.postCtx(ctx, body, opts...)
		if r.Err != nil || r.Status != http.StatusConflict {
			return r
		}
		if ctx.Err() != nil {
			e.t.Fatalf("still 409 after %v: the store never saw the owner gone", waitLimit)
		}
	}
}
