package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// jsonHasType reports whether body is a JSON object with type typ.
func jsonHasType(t *testing.T, body []byte, typ string) bool {
	t.Helper()
	var p Problem
	return json.Unmarshal(body, &p) == nil && p.Type == typ
}

func TestGuardPanicsWhenMisused(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		f    func()
		want string
	}{
		"nil store": {func() { NewGuard(nil) }, "server: NewGuard(nil): want a Store"},
		"zero": {func() {
			new(Guard).Serve(nil, request("POST", "/", ""), func(http.ResponseWriter, *http.Request) bool { return true })
		}, "server: Guard.Serve on a zero Guard: want a Guard made by NewGuard"},
		"nil run": {func() { NewGuard(&fakeStore{}).Serve(nil, request("POST", "/", ""), nil) },
			"server: Guard.Serve(w, r, nil): want a run function"},
	} {
		t.Run(name, func(t *testing.T) {
			if msg := mustPanic(t, c.f); msg != c.want {
				t.Errorf("panic %q, want %q", msg, c.want)
			}
		})
	}
}

// A replay or a refusal never calls run.
func TestGuardCallsRunOnlyToExecute(t *testing.T) {
	t.Parallel()
	g := NewGuard(&fakeStore{})
	runs := 0
	run := func(w http.ResponseWriter, r *http.Request) bool {
		runs++
		w.WriteHeader(http.StatusCreated)
		return true
	}
	first := request("POST", "/pay", `{"a":1}`, HeaderKey, "k0")
	serveGuard(g, first, func(w http.ResponseWriter, r *http.Request) bool {
		if r == first {
			t.Error("a protected request's run got the very request given to Serve")
		}
		return true
	})
	for _, c := range []struct {
		name, body string
		hdr        []string
		status     int
	}{
		{"first", `{"a":1}`, []string{HeaderKey, "k1"}, 201},
		{"replay", `{"a":1}`, []string{HeaderKey, "k1"}, 201},
		{"mismatch", `{"a":2}`, []string{HeaderKey, "k1"}, 422},
		{"no key", `{"a":1}`, nil, 400},
	} {
		rec := serveGuard(g, request("POST", "/pay", c.body, c.hdr...), run)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.name, rec.Code, c.status)
		}
	}
	if runs != 1 {
		t.Errorf("run called %d times, want 1", runs)
	}
}

// An answer left to an outer layer: the key is released and nothing is
// written, so the outer layer's answer is the only one; the retry runs.
func TestGuardUnansweredReleasesAndWritesNothing(t *testing.T) {
	t.Parallel()
	g := NewGuard(&fakeStore{})
	runs := 0
	run := func(w http.ResponseWriter, r *http.Request) bool {
		runs++
		w.Header().Set("X-Inner", "1")
		return false
	}
	for range 2 {
		rec := serveGuard(g, request("POST", "/pay", `{}`, HeaderKey, "k1"), run)
		if rec.Code != http.StatusTeapot || rec.Body.String() != "outer" || rec.Header().Get("X-Inner") != "" {
			t.Fatalf("answer %d %v %q, want the outer layer's own", rec.Code, rec.Header(), rec.Body)
		}
	}
	if runs != 2 {
		t.Errorf("run called %d times, want 2 (released each time)", runs)
	}
}

// After a declared effect, an unanswered request records outcome-unknown.
func TestGuardUnansweredAfterEffectIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	g := NewGuard(&fakeStore{})
	runs := 0
	run := func(w http.ResponseWriter, r *http.Request) bool {
		runs++
		DeclareEffect(r.Context())
		return false
	}
	first := serveGuard(g, request("POST", "/pay", `{}`, HeaderKey, "k1"), run)
	if first.Code != 500 || !jsonHasType(t, first.Body.Bytes(), ProblemOutcomeUnknown) {
		t.Fatalf("first %d %s, want outcome-unknown", first.Code, first.Body)
	}
	retry := serveGuard(g, request("POST", "/pay", `{}`, HeaderKey, "k1"), run)
	if retry.Header().Get(HeaderReplayed) != "true" || !jsonHasType(t, retry.Body.Bytes(), ProblemOutcomeUnknown) {
		t.Fatalf("retry %d %s, want outcome-unknown replayed", retry.Code, retry.Body)
	}
	if runs != 1 {
		t.Errorf("run called %d times, want 1", runs)
	}
}

func TestGuardPassesUnprotectedMethods(t *testing.T) {
	t.Parallel()
	g := NewGuard(&fakeStore{})
	r := request("GET", "/pay", "")
	var seen *http.Request
	rec := serveGuard(g, r, func(w http.ResponseWriter, got *http.Request) bool {
		seen = got
		w.WriteHeader(http.StatusTeapot)
		return false
	})
	if seen != r || rec.Code != http.StatusTeapot {
		t.Errorf("GET: request %p (want %p), status %d", seen, r, rec.Code)
	}
}

// serveGuard serves r through g; an outer layer answers 418 "outer" when
// nothing was written.
func serveGuard(g *Guard, r *http.Request, run func(http.ResponseWriter, *http.Request) bool) *responseProbe {
	p := newProbe()
	g.Serve(p, r, run)
	if !p.wrote {
		p.WriteHeader(http.StatusTeapot)
		_, _ = p.Write([]byte("outer"))
	}
	return p
}

// responseProbe is a ResponseRecorder that says whether anything was written.
type responseProbe struct {
	*httptest.ResponseRecorder
	wrote bool
}

func newProbe() *responseProbe { return &responseProbe{ResponseRecorder: httptest.NewRecorder()} }

func (p *responseProbe) WriteHeader(code int) {
	p.wrote = true
	p.ResponseRecorder.WriteHeader(code)
}

func (p *responseProbe) Write(b []byte) (int, error) {
	p.wrote = true
	return p.ResponseRecorder.Write(b)
}
