package storetest

import (
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem/server"
)

// testDeclared5xx: a handler that makes its effect, declares it
// (server.DeclareEffect) and then answers its own 500 has that 500 recorded:
// the retry gets it replayed and the effect happened once, on every store
// (a transactional one commits the business write with the record).
func testDeclared5xx(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(9000)
	var once sync.Once
	e.setFailAfterWrite(func(r *http.Request) bool {
		fail := false
		once.Do(func() { fail = server.DeclareEffect(r.Context()) })
		return fail
	})
	first := e.post(body, withKey("declared-1"))
	if first.Err != nil || first.Status != http.StatusInternalServerError || first.replayed() {
		t.Fatalf("first request: got %v, want the handler's own 500", first)
	}
	e.wantEffects(1)
	wantReplayOf(t, e.post(body, withKey("declared-1")), first, "retry after the declared effect's 500")
	e.wantEffects(1)
}

// testDeclaredPanic: a handler that declares its effect and then panics
// leaves the key outcome-unknown: the retry gets the recorded 500
// outcome-unknown problem, never a second run.
func testDeclaredPanic(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(9100)
	var once sync.Once
	e.setAfterWrite(func(r *http.Request) {
		once.Do(func() {
			server.DeclareEffect(r.Context())
			panic("crash after the declared effect")
		})
	})
	if r := e.post(body, withKey("declared-2")); r.Err == nil {
		t.Errorf("request whose handler panicked: got %v, want the connection aborted", r)
	}
	e.obs.waitUntil(t, "the store finished the panicked request", func(c counts) bool { return c.returned > 0 })
	retry := e.post(body, withKey("declared-2"))
	if retry.Err != nil || retry.Status != http.StatusInternalServerError || !retry.replayed() ||
		!jsonHasType(retry.Body, server.ProblemOutcomeUnknown) {
		t.Fatalf("retry: got %v, want the outcome-unknown problem replayed", retry)
	}
	e.wantEffects(1)
}
