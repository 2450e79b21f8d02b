package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A handler that charges, declares it, and then fails a later step with a
// 500 is charged once: the 500 is recorded and replayed, the key is not
// released.
func TestDeclaredEffectRecordsA5xx(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		if !DeclareEffect(r.Context()) {
			t.Error("DeclareEffect reported an unprotected request")
		}
		http.Error(w, "receipt service down", http.StatusInternalServerError)
	})
	mw := Middleware(store)(h)
	first := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	if first.Code != http.StatusInternalServerError || first.Header().Get(HeaderReplayed) != "" {
		t.Fatalf("first: %d %v, want the handler's own 500", first.Code, first.Header())
	}
	retry := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	if retry.Code != http.StatusInternalServerError || retry.Header().Get(HeaderReplayed) != "true" ||
		retry.Body.String() != first.Body.String() {
		t.Fatalf("retry: %d %v %q, want the first 500 replayed", retry.Code, retry.Header(), retry.Body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// Without a declaration a 5xx still releases the key (the default).
func TestUndeclared5xxStillReleases(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	h := counting(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mw := Middleware(store)(h)
	for range 2 {
		if rec := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1")); rec.Header().Get(HeaderReplayed) != "" {
			t.Fatalf("a 5xx without a declared effect was replayed")
		}
	}
	if n := h.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (released after each 5xx)", n)
	}
}

// After a declaration every status is recorded, a refusal included.
func TestDeclaredEffectRecordsARefusal(t *testing.T) {
	t.Parallel()
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		DeclareEffect(r.Context())
		w.WriteHeader(http.StatusUnprocessableEntity)
	})
	mw := Middleware(&fakeStore{})(h)
	serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	if rec := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1")); rec.Code != 422 || rec.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %v, want the 422 replayed", rec.Code, rec.Header())
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// A panic after the declaration records outcome-unknown: the first request
// still sees its panic passed on, every retry the 500 problem, and the
// handler never runs again.
func TestDeclaredEffectThenPanicIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	var events []OutcomeEvent
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		DeclareEffect(r.Context())
		panic("after the charge")
	})
	mw := Middleware(&fakeStore{}, WithOnOutcome(func(ev OutcomeEvent) { events = append(events, ev) }))(h)
	func() {
		defer func() {
			if v := recover(); v != "after the charge" {
				t.Errorf("panic %v, want the handler's passed on", v)
			}
		}()
		serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	}()
	retry := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	if retry.Code != http.StatusInternalServerError || retry.Header().Get(HeaderReplayed) != "true" ||
		!jsonHasType(t, retry.Body.Bytes(), ProblemOutcomeUnknown) {
		t.Fatalf("retry: %d %v %s, want outcome-unknown replayed", retry.Code, retry.Header(), retry.Body)
	}
	if ct := retry.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("replayed Content-Type %q", ct)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if len(events) != 2 || !events[0].Stored || events[0].Panic == nil {
		t.Errorf("events %+v, want the panicked run stored, then the replay", events)
	}
}

// A response too large to record after the declaration: outcome unknown,
// recorded, sent.
func TestDeclaredEffectThenTooLargeIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		DeclareEffect(r.Context())
		_, _ = w.Write(make([]byte, 64))
	})
	mw := Middleware(&fakeStore{}, WithMaxResponseBytes(10))(h)
	first := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	checkProblem(t, first, http.StatusInternalServerError, ProblemOutcomeUnknown)
	retry := serve(mw, request("POST", "/pay", `{}`, HeaderKey, "k1"))
	if retry.Header().Get(HeaderReplayed) != "true" || retry.Body.String() != first.Body.String() {
		t.Fatalf("retry %d %q, want the outcome-unknown problem replayed", retry.Code, retry.Body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestDeclareEffectOutsideAProtectedRequest(t *testing.T) {
	t.Parallel()
	if DeclareEffect(context.Background()) {
		t.Error("DeclareEffect(context.Background()) = true")
	}
	var got bool
	mw := Middleware(&fakeStore{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = DeclareEffect(r.Context())
	}))
	serve(mw, request("GET", "/pay", ""))
	if got {
		t.Error("DeclareEffect on an unprotected GET = true")
	}
}

// In net/http a handler that writes nothing answers 200 with an empty body
// (net/http sends that): it is a response like any other, recorded and
// replayed, so the retry gets what the first request got.
func TestHandlerThatWritesNothingIsAnImplicit200(t *testing.T) {
	t.Parallel()
	h := counting(func(http.ResponseWriter, *http.Request) {})
	mw := Middleware(&fakeStore{})(h)
	srv := httptest.NewServer(mw)
	defer srv.Close()
	var got []string
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set(HeaderKey, "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.Status+" replayed="+resp.Header.Get(HeaderReplayed)+" length="+resp.Header.Get("Content-Length"))
	}
	want := []string{"200 OK replayed= length=0", "200 OK replayed=true length=0"}
	if got[0] != want[0] || got[1] != want[1] {
		t.Errorf("answers %q, want %q", got, want)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
