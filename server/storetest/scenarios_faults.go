package storetest

import (
	"errors"
	"net/http"
	"sync"
	"testing"
)

// testServerError: a 5xx answer is not stored; the retry runs the handler
// again and succeeds.
func testServerError(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(7000)
	var once sync.Once
	e.setBeforeWrite(func(*http.Request) error {
		var err error
		once.Do(func() { err = errors.New("effect briefly refused") })
		return err
	})
	failed := e.post(body, withKey("fail-1"))
	if failed.Err != nil || failed.Status != http.StatusServiceUnavailable || failed.replayed() {
		t.Errorf("first request: got %v, want the handler's own 503", failed)
	}
	if !jsonHasType(failed.Body, problemEffect) {
		t.Errorf("first request: body %s is not the handler's problem", failed.Body)
	}
	e.wantEffects(0)
	ok := e.post(body, withKey("fail-1"))
	wantExecuted(t, ok, "retry after a 5xx")
	wantReplayOf(t, e.post(body, withKey("fail-1")), ok, "retry after the success")
	e.wantEffects(1)
}

// testPanic: a handler that panics after the business write releases the key
// (the middleware passes the panic on, so the client sees the connection
// aborted); the retry executes. With a transactional store the first effect
// was rolled back (one effect); otherwise it stays: that is the documented
// crash window (two effects), and the suite asserts exactly that.
func testPanic(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(8000)
	var once sync.Once
	e.setAfterWrite(func(*http.Request) {
		once.Do(func() { panic("crash after the business write") })
	})
	if r := e.post(body, withKey("crash-1")); r.Err == nil {
		t.Errorf("request whose handler panicked: got %v, want the connection aborted", r)
	}
	e.obs.waitUntil(t, "the store finished the panicked request", func(c counts) bool { return c.returned > 0 })
	ok := e.post(body, withKey("crash-1"))
	wantExecuted(t, ok, "retry after the panic")
	want := 2
	if f.Transactional {
		want = 1
	}
	e.wantEffects(want)
	wantReplayOf(t, e.post(body, withKey("crash-1")), ok, "retry after the success")
}
