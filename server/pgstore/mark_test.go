package pgstore_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// post serves a keyed POST of body through the middleware on e's store to h,
// in this process.
func (e env) post(key, body string, h http.HandlerFunc) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/effects", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	server.Middleware(e.store, server.WithScope(func(*http.Request) (string, error) { return "tenant-a", nil }))(h).ServeHTTP(w, r)
	return w
}

// problemType is the type of a problem+json answer.
func problemType(w *httptest.ResponseRecorder) string {
	var p struct{ Type string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	return p.Type
}

// rowState is the state of the live row of key, "" when there is none, read
// on a connection of the test's own.
func (e env) rowState(t *testing.T, key string) string {
	t.Helper()
	var state string
	err := e.pool.QueryRow(context.Background(), "SELECT state FROM "+e.table+" WHERE key = $1 AND expires_at > clock_timestamp()", key).Scan(&state)
	if err != nil {
		return ""
	}
	return state
}

// beginThen is a handler that begins its effect (server.BeginEffect, whose
// error fails the test) and then calls then, which answers.
func beginThen(t *testing.T, then func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := server.BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		then(w, r)
	}
}

// made answers 201 "made".
func made(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte("made"))
}

// TestEffectMarkIsCommittedBeforeBeginEffectReturns: the mark is a row of its
// own, visible to every other session as soon as BeginEffect returns, while
// the claim's transaction is still open; the record then replaces it.
func TestEffectMarkIsCommittedBeforeBeginEffectReturns(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		e := newEnvVia(t, tp)
		seen := ""
		w := e.post("k", "a", beginThen(t, func(w http.ResponseWriter, r *http.Request) {
			seen = e.rowState(t, "k")
			made(w, r)
		}))
		if w.Code != http.StatusCreated {
			t.Fatalf("first request: %d %s", w.Code, w.Body)
		}
		if seen != "claimed" {
			t.Fatalf("after BeginEffect another session saw the key's row as %q; want the committed mark (claimed)", seen)
		}
		if got := e.rowState(t, "k"); got != "done" {
			t.Fatalf("after the record the row is %q; want the record (done) in place of the mark", got)
		}
		if w := e.post("k", "a", made); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d replayed=%q; want the replay", w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	})
}

// TestEffectMarkOfAGoneOwner: a claim whose owner began its effect and whose
// session then ended (as a crash of its process ends it) leaves the mark:
// every later request of the key is outcome-unknown (another body: 422) and
// never runs, until the mark expires with the record's TTL; then the key is
// new.
func TestEffectMarkOfAGoneOwner(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		e := newEnvVia(t, tp)
		first := e.post("k", "a", beginThen(t, func(w http.ResponseWriter, r *http.Request) {
			pgtest.EndSession(t, pgstore.Tx(r.Context()))
			made(w, r)
		}))
		if first.Code != http.StatusInternalServerError || problemType(first) != server.ProblemOutcomeUnknown {
			t.Fatalf("the owner whose session ended: %d %s; want outcome-unknown", first.Code, first.Body)
		}
		mustNotRun := func(w http.ResponseWriter, _ *http.Request) {
			t.Error("a request ran the handler over a mark whose owner is gone")
			w.WriteHeader(http.StatusCreated)
		}
		for range 2 {
			if w := e.post("k", "a", mustNotRun); w.Code != http.StatusInternalServerError || problemType(w) != server.ProblemOutcomeUnknown {
				t.Fatalf("retry: %d %s; want outcome-unknown", w.Code, w.Body)
			}
		}
		if w := e.post("k", "another body", mustNotRun); w.Code != http.StatusUnprocessableEntity {
			t.Fatalf("another body: %d %s; want 422", w.Code, w.Body)
		}
		pgtest.Advance(t, e.pool, e.table, 25*time.Hour) // past the middleware's TTL (24 h)
		if w := e.post("k", "a", made); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("after the mark expired: %d %s; want the key new again", w.Code, w.Body)
		}
	})
}

// TestBeginEffectFailsWhenTheClaimIsGone: a handler whose claim's session has
// already ended (a partition that PostgreSQL's idle timeout closed, a backend
// terminated) is told by BeginEffect that the mark could not be made, so it
// does not start its effect; no mark is left, and the key is free.
func TestBeginEffectFailsWhenTheClaimIsGone(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		e := newEnvVia(t, tp)
		var markErr error
		e.post("k", "a", func(w http.ResponseWriter, r *http.Request) {
			pgtest.EndSession(t, pgstore.Tx(r.Context()))
			if markErr = server.BeginEffect(r.Context()); markErr != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			made(w, r)
		})
		if markErr == nil {
			t.Fatal("BeginEffect after the claim's session ended = nil; want an error: no claim holds the key")
		}
		if got := e.rowState(t, "k"); got != "" {
			t.Fatalf("the key's row is %q; want none", got)
		}
		if w := e.post("k", "a", made); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %s; want it to run", w.Code, w.Body)
		}
	})
}

// TestEffectMarkClearedByARelease: BeginEffect, then CancelEffect and a 503,
// releases the key with its mark: the retry runs.
func TestEffectMarkClearedByARelease(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) {
		e := newEnvVia(t, tp)
		w := e.post("k", "a", beginThen(t, func(w http.ResponseWriter, r *http.Request) {
			server.CancelEffect(r.Context())
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("first request: %d %s; want its own 503", w.Code, w.Body)
		}
		if got := e.rowState(t, "k"); got != "" {
			t.Fatalf("after the release the key's row is %q; want none", got)
		}
		if w := e.post("k", "a", made); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %s; want it to run", w.Code, w.Body)
		}
	})
}
