package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// handlerFunc counts its runs.
type countingHandler struct {
	runs atomic.Int32
	fn   http.HandlerFunc
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	h.fn(w, r)
}

func counting(fn http.HandlerFunc) *countingHandler { return &countingHandler{fn: fn} }

// created answers 201 with a JSON body and a Location.
func created(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/things/1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"echo":` + string(body) + `}`))
}

// request builds a request; hdr holds name, value pairs, added in order.
func request(method, target, body string, hdr ...string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// checkProblem checks a problem answer.
func checkProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, typ string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p.Type != typ || p.Status != status {
		t.Errorf("problem %+v, want type %s status %d", p, typ, status)
	}
	if rec.Header().Get(HeaderReplayed) != "" {
		t.Errorf("a problem answer carries %s", HeaderReplayed)
	}
}

// mustPanic runs f and returns the panic message, failing if f does not panic.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		v := recover()
		if v == nil {
			t.Fatalf("no panic")
		}
		msg, _ = v.(string)
	}()
	f()
	return ""
}
