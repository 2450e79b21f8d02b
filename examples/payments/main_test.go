package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// row is one parsed transcript line; key "KEY" stands for the operation's key.
type row struct{ step, attempt, status, key, replayed, payments string }

var (
	columns = regexp.MustCompile(`\s{2,}`)
	hexKey  = regexp.MustCompile(`^[0-9a-f]{8}$`)
)

// parseRows returns the table lines of a transcript (those of steps a, b, c).
func parseRows(t *testing.T, out string) []row {
	t.Helper()
	var rows []row
	for _, l := range strings.Split(out, "\n") {
		f := columns.Split(strings.TrimSpace(l), -1)
		if len(f) != 6 || !strings.Contains("abc", f[0]) || len(f[0]) != 1 {
			continue
		}
		rows = append(rows, row{f[0], f[1], f[2], f[3], f[4], f[5]})
	}
	return rows
}

// TestTranscript runs the demo and checks the story it tells: the naive loop
// charges twice; the idem client times out, gets 409, then the first
// attempt's own late 201, and charges once; the key sent again gets the replay
// with the same body and 422 with another.
func TestTranscript(t *testing.T) {
	var buf bytes.Buffer
	if err := run(&buf); err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	out := buf.String()
	want := []row{
		{"a", "1", "timed out after 300ms", "-", "-", "0"},
		{"a", "2", "201 Created", "-", "false", "1"},
		{"a", "-", "(the slow first request finished)", "-", "-", "2"},
		{"b", "1", "timed out after 300ms, kept open", "KEY", "-", "0"},
		{"b", "2", "409 in progress, Retry-After 1s", "KEY", "-", "0"},
		{"b", "1", "201 Created", "KEY", "false", "1"}, // the first attempt's own answer
		{"c", "1", "201 Created", "KEY", "true", "1"},
		{"c", "1", "422 Idempotency-Key reused", "KEY", "false", "1"},
	}
	got := parseRows(t, out)
	if len(got) != len(want) {
		t.Fatalf("transcript has %d rows, want %d:\n%s", len(got), len(want), out)
	}
	key := got[3].key
	if !hexKey.MatchString(key) {
		t.Fatalf("key column %q is not a shortened UUID:\n%s", key, out)
	}
	for i, w := range want {
		if w.key == "KEY" {
			w.key = key // one operation, one key, on every attempt and in (c)
		}
		if got[i] != w {
			t.Errorf("row %d = %+v, want %+v", i, got[i], w)
		}
	}
	for _, s := range []string{"cus_alice (naive retry) has 2 payments, cus_bob (idem) has 1", "done in "} {
		if !strings.Contains(out, s) {
			t.Errorf("transcript lacks %q", s)
		}
	}
	if t.Failed() {
		t.Logf("transcript:\n%s", out)
	}
}
