package storetest

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/server"
)

// floodDuplicates is how many duplicates testDuplicateFlood sends: more than
// the connection pools the stores' suites use, so that a store whose waiters
// each hold a connection runs out.
const floodDuplicates = 40

// testDuplicateFlood: one tenant sends many duplicates of a slow request, each
// allowed to wait. While they wait, another tenant's new keys all run: waiting
// duplicates take nothing the others need (a connection, a lock, a place). Once
// the first request finishes, each duplicate gets its replay, or the 409 of a
// store whose own bound on waiting ended first.
func testDuplicateFlood(t *testing.T, f Fixture) {
	e := newEnv(t, f, server.WithScope(server.BearerScope), server.WithInProgressWait(waitLimit))
	body := e.body(2700)
	entered, release := e.blockFirstWrite()
	defer release.open()
	firstC := make(chan reply, 1)
	go func() { firstC <- e.post(body, withKey("flood-1"), withBearer("tenant-a")) }()
	entered.wait(t, "the slow request's business write")

	dupC := make(chan reply, floodDuplicates)
	for range floodDuplicates {
		go func() { dupC <- e.post(body, withKey("flood-1"), withBearer("tenant-a")) }()
	}
	e.obs.waitUntil(t, "the store was asked for every duplicate", func(c counts) bool { return c.calls >= 1+floodDuplicates })
	const others = 10
	for i := range others {
		r := e.post(e.body(2800+int64(i)), withKey(fmt.Sprint("other-", i)), withBearer("tenant-b"))
		wantExecuted(t, r, "another tenant's new key during a flood of duplicates")
	}

	release.open()
	first := recv(t, firstC, "the slow request")
	wantExecuted(t, first, "the slow request")
	for range floodDuplicates {
		r := recv(t, dupC, "a duplicate of the flood")
		if r.Err == nil && r.Status == http.StatusConflict {
			continue // the store's own wait bound ended first
		}
		wantReplayOf(t, r, first, "a duplicate of the flood")
	}
	e.wantEffects(1 + others)
}
