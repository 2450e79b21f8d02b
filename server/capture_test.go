package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFirstExecutionAndReplayHeaders(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	body := []byte("\x00\x01binary\xff\r\n")
	rest := string(body[3:]) // written through io.StringWriter
	h := counting(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", "application/octet-stream")
		hd.Set("Location", "/things/7")
		hd["ETag"] = []string{`"v7"`} // not canonical: still allow-listed
		hd.Add("X-Custom", "one")
		hd.Add("X-Custom", "two")
		hd.Set("X-Private", "p")
		hd.Set("Set-Cookie", "s=1")
		hd.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
		hd.Set("Cache-Control", "private")
		hd.Set(HeaderReplayed, "true") // a handler cannot fake the marker on a first execution
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body[:3])
		_, _ = io.WriteString(w, rest)
	})
	mw := Middleware(store, WithStoredHeaders("x-custom"))(h)

	first := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
	if first.Code != http.StatusCreated || !bytes.Equal(first.Body.Bytes(), body) {
		t.Fatalf("first: %d %q", first.Code, first.Body)
	}
	for _, name := range []string{"Content-Type", "Location", "ETag", "X-Private", "Set-Cookie", "Date", "Cache-Control"} {
		if first.Header().Values(name) == nil && first.Header()[name] == nil {
			t.Errorf("first execution lacks %s: every header the handler set is sent", name)
		}
	}
	if first.Header().Get(HeaderReplayed) != "" {
		t.Errorf("first execution carries %s", HeaderReplayed)
	}

	recorded := store.records[[2]string{"", "k"}].resp
	wantStored := http.Header{
		"Content-Type": {"application/octet-stream"}, "Location": {"/things/7"},
		"Etag": {`"v7"`}, "X-Custom": {"one", "two"},
	}
	if len(recorded.Header) != len(wantStored) {
		t.Errorf("stored headers %v, want %v", recorded.Header, wantStored)
	}
	for k, v := range wantStored {
		if strings.Join(recorded.Header[k], "|") != strings.Join(v, "|") {
			t.Errorf("stored %s = %q, want %q", k, recorded.Header[k], v)
		}
	}

	again := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
	if again.Code != http.StatusCreated || !bytes.Equal(again.Body.Bytes(), body) || h.runs.Load() != 1 {
		t.Fatalf("replay: %d %q runs=%d", again.Code, again.Body, h.runs.Load())
	}
	if again.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("replay lacks %s: true", HeaderReplayed)
	}
	for k, v := range wantStored {
		if strings.Join(again.Header()[k], "|") != strings.Join(v, "|") {
			t.Errorf("replayed %s = %q, want %q", k, again.Header()[k], v)
		}
	}
	for _, name := range []string{"X-Private", "Set-Cookie", "Date", "Cache-Control"} {
		if v := again.Header().Values(name); v != nil {
			t.Errorf("replay carries %s: %q", name, v)
		}
	}
}

func TestKeepDecisions(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("z", 20)
	cases := []struct {
		name     string
		opts     []Option
		handler  http.HandlerFunc
		status   int    // sent on the first execution
		body     string // sent on the first execution ("" = not checked)
		problem  string // problem type, when the middleware answers
		keep     bool
		wantRuns int32 // after a retry
	}{
		{"201", nil, created, 201, `{"echo":{}}`, "", true, 1},
		{"implied 200", nil, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }, 200, "ok", "", true, 1},
		{"nothing written", nil, func(http.ResponseWriter, *http.Request) {}, 200, "", "", true, 1},
		{"404 is kept", nil, func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }, 404, "", "", true, 1},
		{"early hints dropped", nil, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusOK) // superfluous: ignored
		}, 201, "", "", true, 1},
		{"500 released", nil, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) }, 500, "boom\n", "", false, 2},
		{"503 released", nil, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }, 503, "", "", false, 2},
		{"flush is a no-op", nil, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("ResponseController.Flush: %v", err)
			}
			_, _ = io.WriteString(w, "b")
		}, 200, "ab", "", true, 1},
		{"hijack refused", nil, func(w http.ResponseWriter, _ *http.Request) {
			if _, _, err := w.(http.Hijacker).Hijack(); !errors.Is(err, ErrUnprotectable) {
				t.Errorf("Hijack: %v, want ErrUnprotectable", err)
			}
			w.WriteHeader(http.StatusSwitchingProtocols)
		}, 500, "", ProblemUnprotectable, false, 2},
		{"hijack through ResponseController refused", nil, func(w http.ResponseWriter, _ *http.Request) {
			if _, _, err := http.NewResponseController(w).Hijack(); !errors.Is(err, ErrUnprotectable) {
				t.Errorf("ResponseController.Hijack: %v, want ErrUnprotectable", err)
			}
			_, _ = io.WriteString(w, "done")
		}, 500, "", ProblemUnprotectable, false, 2},
		{"response over the limit refused", []Option{WithMaxResponseBytes(8)}, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			if n, err := io.WriteString(w, big[:5]); n != 5 || err != nil {
				t.Errorf("write within the limit: %d, %v", n, err)
			}
			if n, err := w.Write([]byte(big[5:])); n != 0 || !errors.Is(err, ErrResponseTooLarge) {
				t.Errorf("write past the limit: %d, %v; want 0, ErrResponseTooLarge", n, err)
			}
			if _, err := io.WriteString(w, "x"); !errors.Is(err, ErrResponseTooLarge) {
				t.Errorf("write after the refusal: %v; want ErrResponseTooLarge", err)
			}
		}, 500, "", ProblemUnprotectable, false, 2},
		{"response at the limit is kept", []Option{WithMaxResponseBytes(20)}, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, big)
		}, 200, big, "", true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{}
			h := counting(c.handler)
			mw := Middleware(store, c.opts...)(h)
			rec := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
			if c.problem != "" {
				checkProblem(t, rec, c.status, c.problem)
			} else if rec.Code != c.status || (c.body != "" && rec.Body.String() != c.body) {
				t.Errorf("first: %d %q, want %d %q", rec.Code, rec.Body, c.status, c.body)
			}
			if _, keeps := store.stats(); len(keeps) != 1 || keeps[0] != c.keep {
				t.Errorf("keep decisions %v, want [%v]", keeps, c.keep)
			}
			retry := serve(mw, request("POST", "/x", "{}", HeaderKey, "k"))
			if h.runs.Load() != c.wantRuns {
				t.Errorf("handler ran %d times after a retry, want %d", h.runs.Load(), c.wantRuns)
			}
			if c.keep && (retry.Code != rec.Code || retry.Body.String() != rec.Body.String()) {
				t.Errorf("replay %d %q differs from %d %q", retry.Code, retry.Body, rec.Code, rec.Body)
			}
		})
	}
}

func TestInvalidWriteHeaderPanicsLikeNetHTTP(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	mw := Middleware(store)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(42) }))
	if msg := mustPanic(t, func() { serve(mw, request("POST", "/x", "", HeaderKey, "k")) }); !strings.Contains(msg, "invalid WriteHeader code") {
		t.Errorf("panic %q", msg)
	}
}

func TestPanicReleasesAndIsRaisedAgain(t *testing.T) {
	t.Parallel()
	for _, val := range []any{"boom", http.ErrAbortHandler, errors.New("typed")} {
		store := &fakeStore{}
		var ev OutcomeEvent
		calls := 0
		h := counting(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.Header().Set("Location", "/x/1")
			_, _ = io.WriteString(w, "partial")
			if calls == 1 {
				panic(val)
			}
		})
		mw := Middleware(store, WithOnOutcome(func(e OutcomeEvent) { ev = e }))(h)
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if got := recover(); got != val {
					t.Errorf("recovered %v, want the original value %v", got, val)
				}
			}()
			mw.ServeHTTP(rec, request("POST", "/x", "", HeaderKey, "k"))
		}()
		if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
			t.Errorf("panicking handler's response leaked: %v %q", rec.Header(), rec.Body)
		}
		if _, keeps := store.stats(); len(keeps) != 1 || keeps[0] {
			t.Errorf("keep decisions %v, want [false]", keeps)
		}
		if ev.Panic != val || ev.Status != 0 || ev.Outcome != OutcomeExecuted {
			t.Errorf("event %+v, want the panic value and status 0", ev)
		}
		if rec := serve(mw, request("POST", "/x", "", HeaderKey, "k")); rec.Code != 200 || h.runs.Load() != 2 {
			t.Errorf("retry after the panic: %d, runs %d; want a new execution", rec.Code, h.runs.Load())
		}
	}
}

// TestResponseControllerOverRealServer checks what reaches the real writer
// through Unwrap on a real connection, and what stops at the capture writer.
func TestResponseControllerOverRealServer(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 4)
	mw := Middleware(&fakeStore{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		errs <- rc.SetWriteDeadline(time.Now().Add(time.Minute))
		errs <- rc.SetReadDeadline(time.Now().Add(time.Minute))
		errs <- rc.Flush()
		_, _, err := rc.Hijack()
		errs <- err
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(mw)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("{}"))
	req.Header.Set(HeaderKey, "k")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i, want := range []error{nil, nil, nil, ErrUnprotectable} {
		if got := <-errs; !errors.Is(got, want) {
			t.Errorf("call %d: %v, want %v", i, got, want)
		}
	}
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500 after a refused hijack", resp.StatusCode)
	}
}

// TestReplayMarkerRemovedUnderAnySpelling: a handler that sets the marker
// under a non-canonical map key (which net/http sends as it is) does not get
// it onto a first execution, over a real connection.
func TestReplayMarkerRemovedUnderAnySpelling(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"idempotent-replayed", "IDEMPOTENT-REPLAYED", "Idempotent-replayed"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()[name] = []string{"true"}
				w.WriteHeader(http.StatusCreated)
			})
			srv := httptest.NewServer(Middleware(&fakeStore{})(h))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
			req.Header.Set(HeaderKey, "k")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || resp.Header.Get(HeaderReplayed) != "" {
				t.Errorf("first execution: %d with %s %q", resp.StatusCode, HeaderReplayed, resp.Header.Get(HeaderReplayed))
			}
		})
	}
}
