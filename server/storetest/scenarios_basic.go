package storetest

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// testReplay: a first execution, then a byte-exact replay with the
// allow-listed headers only.
func testReplay(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(1500)
	first := e.post(body, withKey("replay-1"))
	wantExecuted(t, first, "first request")
	if first.Header.Get("Set-Cookie") != cookie || first.Header.Get(privateHdr) != "1" || first.Header.Get("Date") != fixedDate {
		t.Errorf("first execution must send every header the handler set; got %v", first.Header)
	}
	if first.Header.Get("Location") == "" || first.Header.Get("Content-Type") != "application/json" {
		t.Errorf("first execution lacks Location or Content-Type: %v", first.Header)
	}

	again := e.post(body, withKey("replay-1"))
	wantReplayOf(t, again, first, "retry")
	for _, h := range []string{"Location", "Content-Type", "Etag"} {
		if got, want := again.Header.Values(h), first.Header.Values(h); !slices.Equal(got, want) {
			t.Errorf("replayed %s = %q, want %q", h, got, want)
		}
	}
	if v := again.Header.Values("Set-Cookie"); len(v) != 0 {
		t.Errorf("replay carries Set-Cookie %q", v)
	}
	if v := again.Header.Get(privateHdr); v != "" {
		t.Errorf("replay carries %s, which is not allow-listed", privateHdr)
	}
	if again.Header.Get("Date") == fixedDate {
		t.Errorf("replay carries the stored Date %q", fixedDate)
	}
	e.wantEffects(1)
	if c := e.obs.snapshot(); c.outcomes[server.OutcomeExecuted] != 1 || c.outcomes[server.OutcomeReplayed] != 1 {
		t.Errorf("store outcomes %v, want one executed and one replayed", c.outcomes)
	}
}

// testMismatch: a key reused for another request is a 422 and changes
// nothing; CanonicalJSON makes whitespace and key order irrelevant.
func testMismatch(t *testing.T, f Fixture) {
	t.Run("exact_body", func(t *testing.T) {
		e := newEnv(t, f)
		body := e.body(700)
		first := e.post(body, withKey("mm-1"))
		wantExecuted(t, first, "first request")
		wantProblem(t, e.post(e.body(701), withKey("mm-1")), http.StatusUnprocessableEntity, server.ProblemMismatch,
			"same key, other amount")
		wantProblem(t, e.post(reindent(body), withKey("mm-1")), http.StatusUnprocessableEntity, server.ProblemMismatch,
			"same key, same JSON with other whitespace (exact-body fingerprint)")
		wantReplayOf(t, e.post(body, withKey("mm-1")), first, "same key, same body after mismatches")
		e.wantEffects(1)
	})
	t.Run("canonical_json", func(t *testing.T) {
		e := newEnv(t, f, server.WithFingerprint(server.CanonicalJSON))
		body := e.body(800)
		first := e.post(body, withKey("mm-2"))
		wantExecuted(t, first, "first request")
		reordered := `{ "currency": "EUR",` + "\n\t" + `"amount": 800, "op": "` + e.op + `" }`
		wantReplayOf(t, e.post(reordered, withKey("mm-2")), first, "same JSON reordered and re-indented")
		wantProblem(t, e.post(e.body(801), withKey("mm-2")), http.StatusUnprocessableEntity, server.ProblemMismatch,
			"same key, other amount")
		e.wantEffects(1)
	})
}

// testKeys: bad keys are answered 400 before the store is asked; a quoted key
// is the same key as the raw one.
func testKeys(t *testing.T, f Fixture) {
	e := newEnv(t, f)
	body := e.body(300)
	bad := []struct {
		name string
		opt  reqOpt
		typ  string
	}{
		{"missing", func(*http.Request) {}, server.ProblemMissingKey},
		{"blank", withKey("   "), server.ProblemMissingKey},
		{"over_long", withKey(strings.Repeat("k", server.MaxKeyLength+1)), server.ProblemInvalidKey},
		{"non_ascii", withKey("ключ"), server.ProblemInvalidKey},
		{"inner_space", withKey("two words"), server.ProblemInvalidKey},
		{"control_char", withKey("a\tb"), server.ProblemInvalidKey},
		{"unterminated_quote", withKey(`"abc`), server.ProblemInvalidKey},
		{"bad_escape", withKey(`"a\x"`), server.ProblemInvalidKey},
		{"after_closing_quote", withKey(`"abc";p=1`), server.ProblemInvalidKey},
		{"empty_quoted", withKey(`""`), server.ProblemInvalidKey},
		{"two_lines", withKeyLines("k1", "k2"), server.ProblemInvalidKey},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			wantProblem(t, e.post(body, c.opt), http.StatusBadRequest, c.typ, c.name)
		})
	}
	if c := e.obs.snapshot(); c.calls != 0 {
		t.Errorf("the store was asked %d times for requests with bad keys", c.calls)
	}
	e.wantEffects(0)

	t.Run("longest", func(t *testing.T) {
		wantExecuted(t, e.post(body, withKey(strings.Repeat("k", server.MaxKeyLength))), "255-character key")
	})
	t.Run("quoted_equals_raw", func(t *testing.T) {
		b := e.body(301)
		first := e.post(b, withKey(`"same-key"`))
		wantExecuted(t, first, `"same-key" (sf-string)`)
		wantReplayOf(t, e.post(b, withKey("same-key")), first, "same-key (raw) after the quoted form")
		wantReplayOf(t, e.post(b, withKey(` "same-key"  `)), first, "quoted form with whitespace around")
	})
	e.wantEffects(2)
}

// testExpiry: a record lives for the TTL; after it the key is new.
func testExpiry(t *testing.T, f Fixture) {
	const ttl = time.Hour
	e := newEnv(t, f, server.WithTTL(ttl))
	body := e.body(900)
	first := e.post(body, withKey("exp-1"))
	wantExecuted(t, first, "first request")
	f.Advance(ttl / 2)
	wantReplayOf(t, e.post(body, withKey("exp-1")), first, "retry within the TTL")
	e.wantEffects(1)
	f.Advance(ttl/2 + time.Minute)
	wantExecuted(t, e.post(body, withKey("exp-1")), "same key after the TTL")
	e.wantEffects(2)
}

// testScopes: one key under two bearer tokens is two operations, neither
// caller ever sees the other's response, and a caller without credentials is
// refused (401) before the store is asked.
func testScopes(t *testing.T, f Fixture) {
	e := newEnv(t, f, server.WithScope(server.BearerScope))
	body := e.body(1200)
	a := e.post(body, withKey("shared"), withBearer("token-a"))
	wantExecuted(t, a, "token A")
	b := e.post(body, withKey("shared"), withBearer("token-b"))
	wantExecuted(t, b, "token B, same key")
	if string(a.Body) == string(b.Body) {
		t.Errorf("two scopes share a response: %s / %s", a.Body, b.Body)
	}
	calls := e.obs.snapshot().calls
	wantProblem(t, e.post(body, withKey("shared")), http.StatusUnauthorized, server.ProblemUnauthenticated, "no token, same key")
	if c := e.obs.snapshot().calls; c != calls {
		t.Errorf("the store was asked for a request without credentials")
	}
	wantReplayOf(t, e.post(body, withKey("shared"), withBearer("token-a")), a, "token A again")
	wantReplayOf(t, e.post(body, withKey("shared"), withBearer("token-b")), b, "token B again")
	e.wantEffects(2)
}

// testBodyTooLarge: a body over the limit is a 413 and claims nothing.
func testBodyTooLarge(t *testing.T, f Fixture) {
	const limit = 256
	e := newEnv(t, f, server.WithMaxBodyBytes(limit))
	big := `{"op":"` + e.op + `","amount":5,"currency":"EUR","pad":"` + strings.Repeat("x", 2*limit) + `"}`
	wantProblem(t, e.post(big, withKey("big-1")), http.StatusRequestEntityTooLarge, server.ProblemBodyTooLarge,
		"body over the limit, with Content-Length")
	wantProblem(t, e.post(big, withKey("big-1"), chunked()), http.StatusRequestEntityTooLarge, server.ProblemBodyTooLarge,
		"body over the limit, chunked")
	if c := e.obs.snapshot(); c.calls != 0 {
		t.Errorf("the store was asked %d times for bodies over the limit", c.calls)
	}
	wantExecuted(t, e.post(e.body(5), withKey("big-1")), "same key with a body within the limit")
	e.wantEffects(1)
}

// reindent rewrites a compact JSON object with other whitespace.
func reindent(s string) string {
	s = strings.ReplaceAll(s, `,"`, ", \n  \"")
	s = strings.ReplaceAll(s, `":`, `": `)
	return strings.Replace(s, "{", "{\n  ", 1)
}
