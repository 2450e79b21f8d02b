package storetest

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// testConcurrent: ten requests with one key, released together by a barrier:
// exactly one runs the handler. The handler holds its business write until
// the store has answered the nine others (or until a second request reaches
// the handler, which is the failure), so the requests really overlap. The
// others, which may not wait (Request.Wait 0), are told in progress.
func testConcurrent(t *testing.T, f Fixture) {
	const n = 10
	e := newEnv(t, f, server.WithInProgressWait(0))
	body := e.body(2500)
	race := e.startRace(n, body, "race-1")

	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	inHandler := 0
wait:
	for {
		c, changed := e.obs.current()
		if inHandler > 0 && c.returned >= n-1 {
			break
		}
		select {
		case <-changed:
		case <-race.entered:
			if inHandler++; inHandler > 1 {
				t.Errorf("two requests with one key ran the handler at the same time")
				break wait
			}
		case <-deadline.C:
			t.Errorf("timed out after %v waiting for the store to answer the duplicates (store saw %+v)", waitLimit, e.obs.snapshot())
			break wait
		}
	}
	var executed []reply
	var replayed []reply
	for _, r := range race.finish() {
		switch {
		case r.Err == nil && r.Status == http.StatusCreated && !r.replayed():
			executed = append(executed, r)
		case r.Err == nil && r.Status == http.StatusCreated:
			replayed = append(replayed, r)
		case r.Err == nil && r.Status == http.StatusConflict:
			wantProblem(t, r, http.StatusConflict, server.ProblemInProgress, "concurrent duplicate")
			wantRetryAfter(t, r, "concurrent duplicate")
		default:
			t.Errorf("concurrent duplicate: got %v, want 201 or 409", r)
		}
	}
	if len(executed) != 1 {
		t.Fatalf("%d of %d concurrent requests executed, want exactly 1", len(executed), n)
	}
	for _, r := range replayed {
		wantReplayOf(t, r, executed[0], "concurrent duplicate")
	}
	wantReplayOf(t, e.post(body, withKey("race-1")), executed[0], "retry after the race")
	e.wantEffects(1)
}

// testInProgress: a retry that may not wait (Request.Wait 0, by the
// server's setting or the client's Prefer: wait=0) while the first request
// still runs is a 409 at once, with a Retry-After no longer than the lease.
func testInProgress(t *testing.T, f Fixture) {
	const lockTTL = 4 * time.Second
	for _, c := range []struct {
		name string
		opts []server.Option
		req  []reqOpt
	}{
		{"server_wait_0", []server.Option{server.WithInProgressWait(0)}, nil},
		{"prefer_wait_0", nil, []reqOpt{withPrefer("wait=0")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, f, append(c.opts, server.WithLockTTL(lockTTL))...)
			body := e.body(4000)
			entered, release := e.blockFirstWrite()
			firstC := make(chan reply, 1)
			go func() { firstC <- e.post(body, withKey("slow-"+c.name)) }()
			entered.wait(t, "the first request to reach the business write")

			dupC := make(chan reply, 1)
			go func() { dupC <- e.post(body, append(c.req, withKey("slow-"+c.name))...) }()
			dup := recv(t, dupC, "the duplicate that may not wait (the first request is still held)")
			wantProblem(t, dup, http.StatusConflict, server.ProblemInProgress, "duplicate while the first runs")
			wantRetryAfterAtMost(t, dup, lockTTL, "duplicate while the first runs")
			e.wantLeaseRetryAfter(lockTTL)
			wantProblem(t, e.post(e.body(4001), append(c.req, withKey("slow-"+c.name))...), http.StatusUnprocessableEntity,
				server.ProblemMismatch, "other request with the key while the first runs")

			release.open()
			first := recv(t, firstC, "the first request")
			wantExecuted(t, first, "first request")
			wantReplayOf(t, e.post(body, withKey("slow-"+c.name)), first, "retry after the first finished")
			e.wantEffects(1)
		})
	}
}

// testSlowHandler: a handler that runs more than twice as long as the lock TTL
// keeps its claim: a duplicate sent after the lock TTL has passed (in real
// time and on the store's clock) is still told in progress, and the first
// response is still recorded. The lease is a whole second so that a store that
// renews it (Redis, every LockTTL/3) keeps a wide margin on a loaded machine.
func testSlowHandler(t *testing.T, f Fixture) {
	const lockTTL = time.Second
	e := newEnv(t, f, server.WithLockTTL(lockTTL), server.WithInProgressWait(0))
	body := e.body(5000)
	entered, release := e.blockFirstWrite()
	firstC := make(chan reply, 1)
	go func() { firstC <- e.post(body, withKey("lease-1")) }()
	entered.wait(t, "the first request to reach the business write")

	<-time.After(2 * lockTTL) // real time past the lease is what this scenario is about
	f.Advance(2 * lockTTL)
	dup := e.post(body, withKey("lease-1"))
	wantProblem(t, dup, http.StatusConflict, server.ProblemInProgress, "duplicate after the lock TTL, first still running")
	release.open()

	first := recv(t, firstC, "the first request")
	wantExecuted(t, first, "first request, slower than the lock TTL")
	wantReplayOf(t, e.post(body, withKey("lease-1")), first, "retry after the slow first finished")
	e.wantEffects(1)
}

// testDisconnect: a client that goes away while the handler runs must not
// leave its key stuck; the handler's completed work is not repeated.
func testDisconnect(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(6000)
	// The request context as net/http gives it, outside the middleware: it is
	// cancelled when the client disconnects, whatever context the store passes on.
	var (
		mu       sync.Mutex
		outerCtx context.Context
	)
	e.setOnOuter(func(r *http.Request) {
		mu.Lock()
		if outerCtx == nil {
			outerCtx = r.Context()
		}
		mu.Unlock()
	})
	entered, release := e.newGate(), e.newGate()
	var once sync.Once
	e.setBeforeWrite(func(*http.Request) error {
		first := false
		once.Do(func() { first = true })
		if first {
			mu.Lock()
			ctx := outerCtx
			mu.Unlock()
			entered.open()
			select { // the handler outlives its client, then completes
			case <-ctx.Done():
			case <-release.ch:
			}
		}
		return nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstC := make(chan reply, 1)
	go func() { firstC <- e.postCtx(ctx, body, withKey("gone-1")) }()
	entered.wait(t, "the first request to reach the business write")
	cancel()
	if r := recv(t, firstC, "the cancelled request"); r.Err == nil {
		t.Errorf("cancelled request: got %v, want a client error", r)
	}
	e.obs.waitUntil(t, "the store finished the abandoned request", func(c counts) bool { return c.returned > 0 })

	retry := e.post(body, withKey("gone-1"))
	if retry.Err != nil || retry.Status != http.StatusCreated {
		t.Errorf("retry after the client went away: got %v, want 201 (replayed or executed), never stuck", retry)
	}
	e.wantEffects(1)
}

// recv receives one reply, failing the test after waitLimit.
func recv(t *testing.T, ch <-chan reply, what string) reply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitLimit):
		t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		return reply{}
	}
}

// race is n requests with one key, sent at once while the handler is held at
// a gate: the set-up of the concurrency scenarios.
type race struct {
	entered chan struct{} // one value each time a request reaches the handler
	release *gate
	replies chan reply
	wg      sync.WaitGroup
}

// startRace holds the handler at a gate and sends n requests with body and
// key, all released together.
func (e *env) startRace(n int, body, key string) *race {
	r := &race{entered: make(chan struct{}, n), release: e.newGate(), replies: make(chan reply, n)}
	e.setBeforeWrite(func(*http.Request) error {
		r.entered <- struct{}{}
		<-r.release.ch
		return nil
	})
	start := make(chan struct{})
	for range n {
		r.wg.Go(func() {
			<-start
			r.replies <- e.post(body, withKey(key))
		})
	}
	close(start)
	return r
}

// finish opens the gate and returns every reply once all have come.
func (r *race) finish() []reply {
	r.release.open()
	r.wg.Wait()
	close(r.replies)
	var all []reply
	for rep := range r.replies {
		all = append(all, rep)
	}
	return all
}
