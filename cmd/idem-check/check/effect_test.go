package check

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestJSONCount(t *testing.T) {
	for _, tc := range []struct {
		doc, path string
		want      int64
		err       string
	}{
		{`{"count":3}`, "count", 3, ""},
		{`{"data":{"total":"12"}}`, "data.total", 12, ""},
		{`{"payments":[{},{}]}`, "payments", 2, ""},
		{`{"a":[{"n":7}]}`, "a.0.n", 7, ""},
		{`5`, ".", 5, ""},
		{`5`, "", 5, ""},
		{`{"n":2.0}`, "n", 2, ""},
		{`{"n":2.5}`, "n", 0, "not a whole number"},
		{`{"n":"x"}`, "n", 0, "not an integer"},
		{`{"n":true}`, "n", 0, "not a number"},
		{`{"count":1}`, "total", 0, `no field "total" (fields: count)`},
		{`{"a":[1]}`, "a.3", 0, "not an index"},
		{`{"a":1}`, "a.b", 0, "inside a"},
		{`<html>`, "count", 0, "not JSON"},
	} {
		got, err := JSONCount([]byte(tc.doc), tc.path)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("JSONCount(%s, %q) = %d, %v; want %d", tc.doc, tc.path, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrJSONPath)):
			t.Errorf("JSONCount(%s, %q) = %d, %v; want an ErrJSONPath containing %q", tc.doc, tc.path, got, err, tc.err)
		}
	}
}

func FuzzJSONCount(f *testing.F) {
	f.Add([]byte(`{"count":3}`), "count")
	f.Add([]byte(`{"a":[{"n":7}]}`), "a.0.n")
	f.Add([]byte(`[1,2,3]`), ".")
	f.Add([]byte(`{"n":1e400}`), "n")
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		n, err := JSONCount(doc, path)
		if err != nil && !errors.Is(err, ErrJSONPath) {
			t.Fatalf("error %v is not an ErrJSONPath", err)
		}
		if err != nil && n != 0 {
			t.Fatalf("count %d with error %v", n, err)
		}
	})
}

func TestEffectURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer a" {
			http.Error(w, "who?", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"count":4}`))
	}))
	defer srv.Close()
	e := &EffectURL{URL: srv.URL, Path: "count", Header: http.Header{"Authorization": {"Bearer a"}}}
	if n, err := e.Count(context.Background()); n != 4 || err != nil {
		t.Errorf("Count = %d, %v; want 4", n, err)
	}
	e.Header = nil
	if _, err := e.Count(context.Background()); err == nil || !strings.Contains(err.Error(), "status 401, want 200") {
		t.Errorf("Count without credentials: %v", err)
	}
}

func TestEffectCommand(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int64
		err    string
	}{
		{"echo 42", 42, ""},
		{"echo ' 7 '", 7, ""},
		{"exit 3", 3, ""},
		{"true", 0, ""},
		{"echo many; exit 1", 0, "exit status 1"},
		{"echo many", 0, "want an integer"},
	} {
		e := &EffectCommand{Name: "sh", Args: []string{"-c", tc.script}}
		got, err := e.Count(context.Background())
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %d, %v; want %d", tc.script, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %d, %v; want an error containing %q", tc.script, got, err, tc.err)
		}
	}
	if _, err := (&EffectCommand{Name: "/no/such/command"}).Count(context.Background()); err == nil {
		t.Error("a missing command counted")
	}
}

// A count ends when its context does, even when the command leaves a child
// holding its output open (sh killed, the pipeline's other end still
// running): the run's time bound holds through its effect counts. Before
// the command had a WaitDelay, Count waited for the child, 10s here.
func TestEffectCommandEndsWithItsContext(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&EffectCommand{Name: "sh", Args: []string{"-c", "sleep 10 | cat"}}).Count(ctx)
	if took := time.Since(start); took > 200*time.Millisecond+effectWaitDelay+3*time.Second {
		t.Errorf("Count took %s after its context's 200ms", took)
	}
	if err == nil {
		t.Error("no error from a count its context ended")
	}
}
