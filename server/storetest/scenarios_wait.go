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

// earlyWindow is how long a scenario watches for a duplicate answered while
// the first request is still held, before it lets the first finish. A store
// that waits never answers in it, so it never makes a sound store fail; it
// only gives a store that does not wait the time to show it.
const earlyWindow = 100 * time.Millisecond

// startDuplicate sends a duplicate of the held first request and returns once
// the store waits for the first: it holds a turn of the process's bound on
// waiting duplicates (server.WaitTurn), and it is not answered within
// earlyWindow after. The scenario fails if the duplicate is answered before
// (it must wait for the first request) or never takes a turn.
func (e *env) startDuplicate(ctx context.Context, body string, opts ...reqOpt) <-chan reply {
	e.t.Helper()
	turns := e.lim.Waiting()
	dupC := make(chan reply, 1)
	go func() { dupC <- e.postCtx(ctx, body, opts...) }()
	deadline := time.Now().Add(waitLimit)
	for e.lim.Waiting() <= turns {
		select {
		case r := <-dupC:
			e.t.Fatalf("duplicate answered %v while the first request was still held, want it to wait", r)
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for the duplicate to take a turn to wait (server.WaitTurn)", waitLimit)
		}
		time.Sleep(time.Millisecond) // Limits has no notification of its own
	}
	select {
	case r := <-dupC:
		e.t.Fatalf("duplicate answered %v while the first request was still held, want it to wait", r)
	case <-time.After(earlyWindow):
	}
	return dupC
}

// testWaitLateAnswer: the first request made its business write and is slow
// to answer; a duplicate arrives meanwhile, waits, and gets the replay as soon
// as the first finishes, within the wait bound; one effect.
func testWaitLateAnswer(t *testing.T, f Fixture) {
	e := newEnv(t, f, server.WithInProgressWait(waitLimit))
	body := e.body(4100)
	written, release := e.newGate(), e.newGate()
	var once sync.Once
	e.setAfterWrite(func(*http.Request) {
		first := false
		once.Do(func() { first = true })
		if first {
			written.open()
			<-release.ch // written, answered late
		}
	})
	firstC := make(chan reply, 1)
	go func() { firstC <- e.post(body, withKey("late-1")) }()
	written.wait(t, "the first request's business write")

	dupC := e.startDuplicate(context.Background(), body, withKey("late-1"))
	release.open()
	first := recv(t, firstC, "the first request")
	wantExecuted(t, first, "first request, answered late")
	wantReplayOf(t, recv(t, dupC, "the waiting duplicate"), first, "duplicate that waited")
	e.wantWaited(server.OutcomeReplayed)
	e.wantEffects(1)
}

// wantWaited checks Result.Waited over the scenario's Do calls so far: one
// result, of outcome, reports a wait, shorter than waitLimit; no other result
// reports one. (The duplicate waited for about earlyWindow, but a store may
// start counting only after its first look, which may be slow on a loaded
// machine: no lower bound but zero is sure.)
func (e *env) wantWaited(outcome server.Outcome) {
	e.t.Helper()
	c := e.obs.snapshot()
	for o, ws := range c.waited {
		if o != outcome {
			e.t.Errorf("Result.Waited %v reported with outcome %v, want a wait with %v only", ws, o, outcome)
		}
	}
	ws := c.waited[outcome]
	if len(ws) != 1 || ws[0] <= 0 || ws[0] >= waitLimit {
		e.t.Errorf("Result.Waited of the %v results: %v, want one wait in (0, %v): the duplicate waited for the first request",
			outcome, ws, waitLimit)
	}
}

// testWaitOriginalFails: the first request fails (its handler answers 5xx, or
// panics) while a duplicate waits; the store releases the key and the waiting
// duplicate runs the handler itself: exactly one effect, and the retry after
// it gets the duplicate's answer.
func testWaitOriginalFails(t *testing.T, f Fixture) {
	for _, c := range []struct {
		name string
		fail func() error
	}{
		{"5xx", func() error { return errors.New("refused") }},
		{"panic", func() error { panic("crash before the business write") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, f, server.WithInProgressWait(waitLimit))
			body := e.body(4200)
			entered, release := e.newGate(), e.newGate()
			var once sync.Once
			e.setBeforeWrite(func(*http.Request) error {
				first := false
				once.Do(func() { first = true })
				if !first {
					return nil
				}
				entered.open()
				<-release.ch
				return c.fail()
			})
			firstC := make(chan reply, 1)
			go func() { firstC <- e.post(body, withKey("fails-"+c.name)) }()
			entered.wait(t, "the first request to reach the business write")

			dupC := e.startDuplicate(context.Background(), body, withKey("fails-"+c.name))
			release.open()
			if r := recv(t, firstC, "the failing first request"); r.Err == nil && r.Status < 500 {
				t.Errorf("first request: got %v, want its 5xx or the connection aborted", r)
			}
			dup := recv(t, dupC, "the waiting duplicate")
			wantExecuted(t, dup, "duplicate that waited for a first request that failed")
			wantReplayOf(t, e.post(body, withKey("fails-"+c.name)), dup, "retry after the duplicate ran")
			// The duplicate's execution says it waited, so that it is told from a first request.
			e.wantWaited(server.OutcomeExecuted)
			e.wantEffects(1)
		})
	}
}

// testWaitClientGone: a duplicate whose client disconnects stops waiting
// (its Do returns) while the first request is still held.
func testWaitClientGone(t *testing.T, f Fixture) {
	e := newEnv(t, f, server.WithInProgressWait(2*waitLimit))
	body := e.body(4300)
	entered, release := e.blockFirstWrite()
	firstC := make(chan reply, 1)
	go func() { firstC <- e.post(body, withKey("gone-dup-1")) }()
	entered.wait(t, "the first request to reach the business write")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dupC := e.startDuplicate(ctx, body, withKey("gone-dup-1"))
	cancel()
	if r := recv(t, dupC, "the cancelled duplicate"); r.Err == nil {
		t.Errorf("cancelled duplicate: got %v, want a client error", r)
	}
	// Within waitLimit, far below the 2*waitLimit wait: the store stopped
	// waiting when the client left.
	e.obs.waitUntil(t, "the store stopped waiting for the gone duplicate", func(c counts) bool { return c.returned >= 1 })

	release.open()
	wantExecuted(t, recv(t, firstC, "the first request"), "first request")
	e.wantEffects(1)
}

// testConcurrentWait: ten requests with one key, released together, each
// allowed to wait: exactly one runs the handler, and once it finishes every
// other one gets its replay (none is told in progress).
func testConcurrentWait(t *testing.T, f Fixture) {
	const n = 10
	e := newEnv(t, f, server.WithInProgressWait(waitLimit))
	body := e.body(2600)
	race := e.startRace(n, body, "race-wait-1")
	select {
	case <-race.entered:
	case <-time.After(waitLimit):
		t.Fatalf("no request reached the handler within %v", waitLimit)
	}
	e.obs.waitUntil(t, "the store was asked for every duplicate", func(c counts) bool { return c.calls >= n })
	select {
	case <-race.entered:
		t.Fatalf("two requests with one key ran the handler at the same time")
	case <-time.After(earlyWindow):
	}

	var executed, replayed []reply
	for _, r := range race.finish() {
		switch {
		case r.Err == nil && r.Status == http.StatusCreated && !r.replayed():
			executed = append(executed, r)
		case r.Err == nil && r.Status == http.StatusCreated:
			replayed = append(replayed, r)
		default:
			t.Errorf("waiting duplicate: got %v, want 201 (executed or replayed)", r)
		}
	}
	if len(executed) != 1 || len(replayed) != n-1 {
		t.Fatalf("%d executed, %d replayed of %d, want 1 and %d", len(executed), len(replayed), n, n-1)
	}
	for _, r := range replayed {
		wantReplayOf(t, r, executed[0], "waiting duplicate")
	}
	e.wantEffects(1)
}

// testOutcomeUnknown: the store cannot record the response after the
// handler's effect. The caller is told outcome-unknown (500, no
// Retry-After), not invited to retry; and the retry never makes a second
// effect: a store that keeps the key blocked answers outcome-unknown again, a
// transactional one (whose rollback undid the effect) runs it once.
func testOutcomeUnknown(t *testing.T, f Fixture) {
	if f.BreakRecord == nil {
		t.Skip("the fixture cannot break the store (Fixture.BreakRecord)")
	}
	e := newEnv(t, f)
	body := e.body(9000)
	var (
		once   sync.Once
		mu     sync.Mutex
		repair func()
	)
	e.setAfterWrite(func(*http.Request) {
		once.Do(func() {
			r := f.BreakRecord(t)
			mu.Lock()
			repair = r
			mu.Unlock()
		})
	})
	first := e.post(body, withKey("unknown-1"))
	wantProblem(t, first, http.StatusInternalServerError, server.ProblemOutcomeUnknown, "request whose response could not be recorded")
	if v := first.Header.Get("Retry-After"); v != "" {
		t.Errorf("outcome-unknown carries Retry-After %q: it must not invite a retry", v)
	}
	mu.Lock()
	fix := repair
	mu.Unlock()
	if fix == nil {
		t.Fatal("BreakRecord was not called")
	}
	fix()

	retry := e.post(body, withKey("unknown-1"))
	switch {
	case f.Transactional && retry.Status == http.StatusCreated:
		wantExecuted(t, retry, "retry after a rolled-back effect")
		e.wantEffects(1)
	case f.Transactional:
		wantProblem(t, retry, http.StatusInternalServerError, server.ProblemOutcomeUnknown, "retry of an unrecorded outcome")
		e.wantEffects(0) // rolled back, and blocked all the same
	default:
		wantProblem(t, retry, http.StatusInternalServerError, server.ProblemOutcomeUnknown, "retry of an unrecorded outcome")
		e.wantEffects(1)
	}
}

// testWaitTurn: a duplicate waits for the first request only with a turn of
// the process's bound on waiting duplicates (server.WaitTurn). With
// LimitWaiting(1), the first duplicate waits; a second, while it does, is
// answered in progress (409 with Retry-After) at once, while the first request
// is still held, and never runs the handler. Once the first request finishes,
// the waiter gets the replay: one effect.
func testWaitTurn(t *testing.T, f Fixture) {
	e := newEnvLimits(t, f, server.NewLimits(server.LimitWaiting(1)), server.WithInProgressWait(waitLimit))
	body := e.body(4300)
	entered, release := e.blockFirstWrite()
	firstC := make(chan reply, 1)
	go func() { firstC <- e.post(body, withKey("turn-1")) }()
	entered.wait(t, "the first request to reach the business write")

	waiterC := e.startDuplicate(context.Background(), body, withKey("turn-1"))
	refusedC := make(chan reply, 1)
	go func() { refusedC <- e.post(body, withKey("turn-1")) }()
	refused := recv(t, refusedC, "the second duplicate, past LimitWaiting(1) (the first request is still held)")
	wantProblem(t, refused, http.StatusConflict, server.ProblemInProgress, "duplicate with no turn to wait")
	wantRetryAfter(t, refused, "duplicate with no turn to wait")
	select {
	case r := <-waiterC:
		t.Fatalf("the duplicate with a turn answered %v while the first request was still held, want it to wait", r)
	default:
	}

	release.open()
	first := recv(t, firstC, "the first request")
	wantExecuted(t, first, "first request")
	wantReplayOf(t, recv(t, waiterC, "the duplicate that waited with a turn"), first, "duplicate that waited")
	e.wantEffects(1)
}
