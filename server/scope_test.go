package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"
)

func TestBearerScope(t *testing.T) {
	t.Parallel()
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	cases := []struct {
		name  string
		auth  []string
		want  string
		isErr bool
	}{
		{"bearer", []string{"Bearer tok-A"}, "bearer:" + hash("tok-A"), false},
		{"scheme is case-insensitive", []string{"bearer tok-A"}, "bearer:" + hash("tok-A"), false},
		{"whitespace around", []string{"  Bearer   tok-A  "}, "bearer:" + hash("tok-A"), false},
		{"other token", []string{"Bearer tok-B"}, "bearer:" + hash("tok-B"), false},
		{"basic", []string{"Basic dTpw"}, "auth:" + hash("Basic dTpw"), false},
		{"bearer without token", []string{"Bearer"}, "", true},
		{"bearer with blank token", []string{"Bearer    "}, "", true},
		{"two lines", []string{"Bearer a", "Bearer b"}, "", true},
	}
	for _, auth := range [][]string{nil, {""}, {"  "}} {
		r := request("POST", "/x", "")
		if auth != nil {
			r.Header["Authorization"] = auth
		}
		if got, err := BearerScope(r); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authorization %q: got %q, %v; want ErrNoCredentials: anonymous callers share no scope", auth, got, err)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := request("POST", "/x", "")
			if c.auth != nil {
				r.Header["Authorization"] = c.auth
			}
			got, err := BearerScope(r)
			if c.isErr {
				if !errors.Is(err, ErrBadCredentials) {
					t.Fatalf("got %q, %v; want ErrBadCredentials", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestScopesSeparateRecords(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	n := 0
	h := counting(func(w http.ResponseWriter, _ *http.Request) {
		n++
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte{byte('0' + n)})
	})
	mw := Middleware(store, WithScope(BearerScope))(h)
	a := serve(mw, request("POST", "/x", "{}", HeaderKey, "k", "Authorization", "Bearer A"))
	b := serve(mw, request("POST", "/x", "{}", HeaderKey, "k", "Authorization", "Bearer B"))
	if a.Body.String() == b.Body.String() || h.runs.Load() != 2 {
		t.Fatalf("two tokens, one key: bodies %q and %q, runs %d; want two executions", a.Body, b.Body, h.runs.Load())
	}
	a2 := serve(mw, request("POST", "/x", "{}", HeaderKey, "k", "Authorization", "Bearer A"))
	if a2.Body.String() != a.Body.String() || a2.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("token A again: %q, want the replay of %q", a2.Body, a.Body)
	}
	checkProblem(t, serve(mw, request("POST", "/x", "{}", HeaderKey, "k", "Authorization", "Bearer")), 401, ProblemUnauthenticated)
	checkProblem(t, serve(mw, request("POST", "/x", "{}", HeaderKey, "k")), 401, ProblemUnauthenticated)
	if h.runs.Load() != 2 {
		t.Errorf("handler ran %d times, want 2: refused requests never run", h.runs.Load())
	}
}
