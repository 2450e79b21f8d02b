package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestBadCommandLines(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "body.json")
	if err := os.WriteFile(body, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	u := "http://127.0.0.1:1/op"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-url is required"},
		{[]string{"-url", "not a url"}, "want an http:// or https:// URL"},
		{[]string{"-url", "ftp://host/x"}, "want an http:// or https:// URL"},
		{[]string{"-url", "http:///nohost"}, "no host"},
		{[]string{"-url", "http://[::1"}, "-url"},
		{[]string{"-url", u, "-H", "no colon"}, "want 'Name: value'"},
		{[]string{"-url", u, "-H", "bad name: v"}, "is not a header name"},
		{[]string{"-url", u, "-H", ": v"}, "is not a header name"},
		{[]string{"-url", u, "-H2", "Authorization Bearer x"}, "want 'Name: value'"},
		{[]string{"-url", u, "-body", "@" + filepath.Join(dir, "missing.json")}, "no such file"},
		{[]string{"-url", u, "-body", "@"}, "no file name after @"},
		{[]string{"-url", u, "-body", "@" + body, "-body2", "@" + body}, "the same as -body"},
		{[]string{"-url", u, "-ttl", "-1s"}, "-ttl"},
		{[]string{"-url", u, "-ttl", "2h"}, "give -max-wait"},
		{[]string{"-url", u, "-ttl", "1h", "-replay-after", "1h"}, "shorter than -ttl"},
		{[]string{"-url", u, "-max-wait", "-1s"}, "-max-wait"},
		{[]string{"-url", u, "-max-time", "-1s"}, "-max-time"},
		{[]string{"-url", u, "-X", "POST,PO ST"}, `"PO ST" is not a method`},
		{[]string{"-url", u, "-X", "POST,post"}, "given twice"},
		{[]string{"-url", u, "-json", "-json-file", "r.json"}, "not both"},
		{[]string{"-url", u, "-body", `{"a":1}`, "-effect-url", "http://h/c?id={{id}}", "-effect-json", "c"}, "-body has none"},
		{[]string{"-url", u, "-body", `{"a":1}`, "-effect-cmd", "count {{id}}"}, "-body has none"},
		{[]string{"-url", u, "-duplicates", "1"}, "want 2 to 32"},
		{[]string{"-url", u, "-operations", "0"}, "want 1 to 20"},
		{[]string{"-url", u, "-timeout", "0s"}, "-timeout"},
		{[]string{"-url", u, "-X", "PO ST"}, `"PO ST" is not a method`},
		{[]string{"-url", u, "-chaos"}, "-chaos counts effects"},
		{[]string{"-url", u, "-effect-url", "http://127.0.0.1:1/count"}, "needs -effect-json"},
		{[]string{"-url", u, "-effect-json", "count"}, "need -effect-url"},
		{[]string{"-url", u, "-effect-url", "x", "-effect-json", "count"}, "-effect-url"},
		{[]string{"-url", u, "-effect-url", "http://h/c", "-effect-json", "c", "-effect-cmd", "echo 1"}, "not both"},
		{[]string{"-url", u, "extra"}, `unexpected argument "extra"`},
		{[]string{"-nosuchflag"}, "flag provided but not defined"},
	} {
		code, stdout, stderr := runCmd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("idem-check %q: status %d, stderr %q, stdout %q; want 2 and %q", tc.args, code, stderr, stdout, tc.want)
		}
	}
	if code, _, stderr := runCmd(t, "-h"); code != 0 || !strings.Contains(stderr, "usage: idem-check") {
		t.Errorf("-h: status %d, stderr %q", code, stderr)
	}
}

// tinyServer is a minimal, correct idempotency layer for the command's
// tests: one key, one stored answer, scoped by Authorization.
func tinyServer(t *testing.T, flawed bool) *httptest.Server {
	return tinyServerKeeping(t, flawed, 0)
}

// tinyServerKeeping is tinyServer whose records expire keep after they were
// made (0: never).
func tinyServerKeeping(t *testing.T, flawed bool, keep time.Duration) *httptest.Server {
	var mu sync.Mutex
	stored := map[string][]byte{}
	made := map[string]time.Time{}
	bodies := map[string]string{}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		vals := r.Header.Values("Idempotency-Key")
		if len(vals) != 1 || key == "" || len(key) > 255 || strings.ContainsAny(key, "\"é") || !isASCII(key) {
			http.Error(w, "bad key", http.StatusBadRequest)
			return
		}
		if flawed {
			key = "global" // every key is one: replays across principals and bodies
		}
		mu.Lock()
		defer mu.Unlock()
		id := r.Method + "|" + r.Header.Get("Authorization") + "|" + key
		body, _ := io.ReadAll(r.Body)
		body = append(body, r.URL.RawQuery...) // the request is its body and its query
		if keep > 0 && time.Since(made[id]) > keep {
			delete(stored, id)
		}
		if b, ok := stored[id]; ok {
			if bodies[id] != string(body) && !flawed {
				http.Error(w, "another body", http.StatusUnprocessableEntity)
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
			return
		}
		n++
		b := fmt.Appendf(nil, `{"n":%d}`, n)
		stored[id], bodies[id], made[id] = b, string(body), time.Now()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func isASCII(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func TestExitStatusAndOutputs(t *testing.T) {
	good, flawed := tinyServer(t, false), tinyServer(t, true)
	for _, tc := range []struct {
		name string
		url  string
		code int
	}{
		{"no FAIL", good.URL, 0},
		{"a FAIL", flawed.URL, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			junit := filepath.Join(t.TempDir(), "report.xml")
			args := []string{"-url", tc.url, "-body", `{"amount":1}`, "-H", "Authorization: Bearer a",
				"-H2", "Authorization: Bearer b", "-junit", junit}
			code, stdout, stderr := runCmd(t, args...)
			if code != tc.code {
				t.Fatalf("status %d, want %d\n%s\n%s", code, tc.code, stdout, stderr)
			}
			// 1 missing-key, 2 replay, 3 mismatch, 2×(1 field + the
			// query), 2+2 in-progress, 1+60 lease, 2 5xx, 3 scope, 5
			// invalid keys, 3 two-key-lines, 3 quoted, 2 replay-after
			// (5s on purpose, with no flag).
			if !strings.Contains(stderr, "sending at most 215 requests, all to POST "+tc.url+", within 10m5s (waiting 5s of it on purpose)") {
				t.Errorf("stderr does not announce the bound: %q", stderr)
			}
			if !strings.Contains(stdout, "VERDICT  CHECK") || !strings.Contains(stdout, "draft-07") {
				t.Errorf("no table with its sources:\n%s", stdout)
			}
			data, err := os.ReadFile(junit)
			if err != nil {
				t.Fatal(err)
			}
			var suite struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
				Cases    []struct {
					Name    string    `xml:"name,attr"`
					Failure *struct{} `xml:"failure"`
				} `xml:"testcase"`
			}
			if err := xml.Unmarshal(data, &suite); err != nil {
				t.Fatalf("JUnit XML: %v\n%s", err, data)
			}
			if suite.Tests != len(suite.Cases) || suite.Tests < 20 || (suite.Failures > 0) != (tc.code == 1) {
				t.Errorf("JUnit: %d tests, %d cases, %d failures", suite.Tests, len(suite.Cases), suite.Failures)
			}

			code, stdout, _ = runCmd(t, append(slices.Clone(args[:len(args)-2]), "-json")...)
			rep := decodeReport(t, "-json", []byte(stdout))
			if code != tc.code || rep.Sent == 0 || rep.Sent > rep.Budget || len(rep.Rows) < 20 || rep.Rows[0].Source == "" {
				t.Errorf("-json: status %d, %+v", code, rep)
			}
			if rep.Duration > rep.TimeBound {
				t.Errorf("the run took %v, past the %v announced", rep.Duration, rep.TimeBound)
			}

			// The table and the JSON and JUnit files, from one run.
			jsonFile := filepath.Join(t.TempDir(), "report.json")
			code, stdout, _ = runCmd(t, append(args, "-json-file", jsonFile)...)
			data, err = os.ReadFile(jsonFile)
			if err != nil {
				t.Fatal(err)
			}
			fromFile := decodeReport(t, "-json-file", data)
			if code != tc.code || !strings.Contains(stdout, "VERDICT  CHECK") || len(fromFile.Rows) != len(rep.Rows) {
				t.Errorf("-json-file with the table: status %d, %d rows in the file\n%s", code, len(fromFile.Rows), stdout)
			}
			if _, err := os.Stat(junit); err != nil {
				t.Errorf("-junit beside -json-file: %v", err)
			}
		})
	}
}

// report is the part of the JSON report the tests read.
type report struct {
	Budget, Sent int
	Methods      []string
	Duration     time.Duration `json:"duration_ns"`
	TimeBound    time.Duration `json:"time_bound_ns"`
	Rows         []struct{ ID, Method, Verdict, Source string }
}

func decodeReport(t *testing.T, what string, data []byte) report {
	t.Helper()
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
	return rep
}

// -X with a list runs every row for each method; -strict fails a run with a
// WARN or a SKIP (the tiny server's rows that need settings skip).
// TestDefaultRunChecksRetention: with no flag but -url, a run checks that a
// record still replays a few seconds after it was made: against a server
// whose records vanish after a second it FAILs the replay-after row and exits
// 1, within the bound it announced; a server that keeps them passes it.
func TestDefaultRunChecksRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		keep    time.Duration
		code    int
		verdict string
	}{{"records kept", 0, 0, "PASS"}, {"records gone after 1s", time.Second, 1, "FAIL"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := tinyServerKeeping(t, false, tc.keep)
			start := time.Now()
			code, stdout, stderr := runCmd(t, "-url", srv.URL, "-json")
			if code != tc.code {
				t.Fatalf("status %d, want %d\n%s\n%s", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stderr, "(waiting 5s of it on purpose)") {
				t.Errorf("the bound announced does not count the replay-after row's wait: %q", stderr)
			}
			if took := time.Since(start); took < 5*time.Second || took > 10*time.Minute+5*time.Second {
				t.Errorf("the run took %v, want the 5s wait and within the announced bound", took)
			}
			for _, row := range decodeReport(t, "-json", []byte(stdout)).Rows {
				if row.ID == "replay-after" && row.Verdict != tc.verdict {
					t.Errorf("replay-after: %s, want %s", row.Verdict, tc.verdict)
				}
			}
		})
	}
}

func TestMethodsAndStrict(t *testing.T) {
	srv := tinyServer(t, false)
	args := []string{"-url", srv.URL, "-body", `{"amount":1}`, "-H", "Authorization: Bearer a", "-X", "POST,put", "-json"}
	code, stdout, stderr := runCmd(t, args...)
	if code != 0 || !strings.Contains(stderr, "sending at most 430 requests, all to POST,PUT "+srv.URL) {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	rep := decodeReport(t, "-json", []byte(stdout))
	n := map[string]int{}
	for _, row := range rep.Rows {
		n[row.Method]++
	}
	if strings.Join(rep.Methods, ",") != "POST,PUT" || n["POST"] == 0 || n["POST"] != n["PUT"] || n["POST"]+n["PUT"] != len(rep.Rows) {
		t.Errorf("methods %v, rows per method %v", rep.Methods, n)
	}
	code, stdout, _ = runCmd(t, append(slices.Clone(args[:len(args)-1]), "-strict")...)
	if code != 1 || !strings.Contains(stdout, "(strict: a WARN or a SKIP fails the run)") || !strings.Contains(stdout, "POST missing-key") {
		t.Errorf("-strict: status %d, want 1\n%s", code, stdout)
	}
}

// A body template gives each operation its own id, which the effect count
// names: each count is of one operation alone.
func TestBodyTemplate(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodGet { // the effect count of one operation
			fmt.Fprintf(w, `{"count":%d}`, bodies[r.URL.Query().Get("ref")])
			return
		}
		var b struct{ Ref string }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &b)
		bodies[b.Ref]++
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	code, stdout, _ := runCmd(t, "-url", srv.URL, "-body", `{"ref":"op_{{id}}"}`,
		"-effect-url", srv.URL+"/count?ref=op_{{id}}", "-effect-json", "count", "-v")
	if code != 1 || !strings.Contains(stdout, "1 effect(s) for the first request, 1 more for the replay") {
		t.Errorf("status %d: an unprotected server's replay-effect is a FAIL counted per operation\n%s", code, stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	for ref, n := range bodies {
		if !strings.HasPrefix(ref, "op_") || len(ref) != len("op_")+32 || n > 10 {
			t.Errorf("ref %q sent %d times: want op_ and 32 letters or digits, one operation each", ref, n)
		}
	}
	if len(bodies) < 10 {
		t.Errorf("%d distinct ids over the run", len(bodies))
	}
}

func TestEffectCommandFlag(t *testing.T) {
	srv := tinyServer(t, false)
	code, stdout, stderr := runCmd(t, "-url", srv.URL, "-body", `{"amount":1}`, "-effect-cmd", "echo 0", "-v")
	if !strings.Contains(stderr, "effect counts (command sh -c echo 0)") {
		t.Errorf("stderr: %q", stderr)
	}
	// The count never moves: the effect rows say so rather than pass.
	if code != 0 || !strings.Contains(stdout, "WARN     replay-effect") {
		t.Errorf("status %d:\n%s", code, stdout)
	}
}
