package server

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
)

// markingStore is a fakeStore that marks effects, counting its marks and
// failing them with err when set.
func markingStore(marks *atomic.Int32, err error) *fakeStore {
	return &fakeStore{mark: func(context.Context) error {
		marks.Add(1)
		return err
	}}
}

// BeginEffect asks the store for its mark once, however often it is called,
// and from then on the answer is recorded whatever its status: the upstream's
// 502 is replayed, not run again.
func TestBeginEffectMarksOnceAndRecordsA5xx(t *testing.T) {
	t.Parallel()
	var marks atomic.Int32
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		for range 3 {
			if err := BeginEffect(r.Context()); err != nil {
				t.Errorf("BeginEffect: %v", err)
			}
		}
		w.WriteHeader(http.StatusBadGateway)
	})
	mw := Middleware(markingStore(&marks, nil))(h)
	first := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1"))
	retry := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1"))
	if first.Code != http.StatusBadGateway || retry.Code != http.StatusBadGateway || retry.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("first %d, retry %d %v: want the 502 recorded and replayed", first.Code, retry.Code, retry.Header())
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if n := marks.Load(); n != 1 {
		t.Errorf("the store was asked for %d marks, want 1", n)
	}
}

// A mark the store cannot make is BeginEffect's error, wrapping the store's;
// the handler then answers 503 without starting its effect, and the key is
// released: a retry runs.
func TestBeginEffectFailsWhenTheStoreCannotMark(t *testing.T) {
	t.Parallel()
	var marks atomic.Int32
	down := errors.New("store down")
	store := markingStore(&marks, down)
	var effects atomic.Int32
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		if err := BeginEffect(r.Context()); err != nil {
			if !errors.Is(err, down) {
				t.Errorf("BeginEffect: %v, want it to wrap the store's error", err)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		effects.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	mw := Middleware(store)(h)
	if rec := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1")); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want the handler's 503", rec.Code)
	}
	store.mark = nil // the store is back (and marks nothing)
	if rec := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1")); rec.Code != http.StatusCreated || rec.Header().Get(HeaderReplayed) != "" {
		t.Fatalf("retry: %d %v, want a new run", rec.Code, rec.Header())
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// CancelEffect after BeginEffect (the dial failed: nothing left) judges the
// answer by its status again: a 502 releases the key and the retry runs.
func TestCancelEffectReleasesA5xx(t *testing.T) {
	t.Parallel()
	var marks atomic.Int32
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		if err := BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		CancelEffect(r.Context())
		w.WriteHeader(http.StatusBadGateway)
	})
	store := markingStore(&marks, nil)
	mw := Middleware(store)(h)
	for range 2 {
		if rec := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1")); rec.Code != http.StatusBadGateway || rec.Header().Get(HeaderReplayed) != "" {
			t.Fatalf("%d %v, want the handler's own 502, never a replay", rec.Code, rec.Header())
		}
	}
	if n := h.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (released after each cancelled effect)", n)
	}
	if _, keeps := store.stats(); len(keeps) != 2 || keeps[0] || keeps[1] {
		t.Errorf("run said keep %v, want false twice", keeps)
	}
}

// CancelEffect withdraws BeginEffect only: an effect declared with
// DeclareEffect stands, and its 5xx is recorded.
func TestCancelEffectKeepsADeclaredEffect(t *testing.T) {
	t.Parallel()
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		DeclareEffect(r.Context())
		if err := BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		CancelEffect(r.Context())
		w.WriteHeader(http.StatusBadGateway)
	})
	mw := Middleware(&fakeStore{})(h)
	serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1"))
	if rec := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1")); rec.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("retry %d %v, want the declared effect's 502 replayed", rec.Code, rec.Header())
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// A BeginEffect after CancelEffect begins the effect again without a second
// mark: the store's mark is still there.
func TestBeginEffectAfterCancelEffect(t *testing.T) {
	t.Parallel()
	var marks atomic.Int32
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		_ = BeginEffect(r.Context())
		CancelEffect(r.Context())
		if err := BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		w.WriteHeader(http.StatusBadGateway)
	})
	mw := Middleware(markingStore(&marks, nil))(h)
	serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1"))
	if rec := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1")); rec.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("retry %d, want the 502 replayed", rec.Code)
	}
	if n := marks.Load(); n != 1 {
		t.Errorf("%d marks, want 1", n)
	}
}

// On a store that makes no mark, BeginEffect is DeclareEffect: a panic after
// it records outcome-unknown.
func TestBeginEffectWithoutAMarkThenPanicIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		if err := BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		panic("the proxy died mid-forward")
	})
	mw := Middleware(&fakeStore{})(h)
	func() {
		defer func() { _ = recover() }()
		serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1"))
	}()
	retry := serve(mw, request("POST", "/fwd", `{}`, HeaderKey, "k1"))
	if retry.Code != http.StatusInternalServerError || !jsonHasType(t, retry.Body.Bytes(), ProblemOutcomeUnknown) {
		t.Fatalf("retry: %d %s, want outcome-unknown", retry.Code, retry.Body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestBeginEffectOutsideAProtectedRequest(t *testing.T) {
	t.Parallel()
	if err := BeginEffect(context.Background()); !errors.Is(err, ErrNotProtected) {
		t.Errorf("BeginEffect(context.Background()) = %v, want ErrNotProtected", err)
	}
	CancelEffect(context.Background()) // does nothing, does not panic
	var err error
	mw := Middleware(&fakeStore{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err = BeginEffect(r.Context())
	}))
	serve(mw, request("GET", "/fwd", ""))
	if !errors.Is(err, ErrNotProtected) {
		t.Errorf("BeginEffect on an unprotected GET = %v, want ErrNotProtected", err)
	}
}

func TestContextWithEffectMarkNil(t *testing.T) {
	t.Parallel()
	msg := mustPanic(t, func() { ContextWithEffectMark(context.Background(), nil) })
	if msg != "server: ContextWithEffectMark(ctx, nil): want a mark function" {
		t.Errorf("panic %q", msg)
	}
}
