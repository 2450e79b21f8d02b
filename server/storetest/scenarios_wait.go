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
// the store has been asked for it, failing the scenario if the duplicate is
// answered within earlyWindow: it must wait for the first request.
func (e *env) startDuplicate(ctx context.Context, body string, opts ...reqOpt) <-chan reply {
	e.t.Helper()
	before := e.obs.snapshot().calls
	dupC := make(chan reply, 1)
	go func() { dupC <- e.postCtx(ctx, body, opts...) }()
	e.obs.waitUntil(e.t, "the store was asked for the duplicate", func(c counts) bool { return c.calls > before })
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
	e.wantEffects(1)
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
