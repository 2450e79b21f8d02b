package httpfield

import (
	"strings"
	"testing"
	"time"
)

func TestDeltaSeconds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		max  int64
		want int64
		ok   bool
	}{
		{"0", 100, 0, true},
		{"007", 100, 7, true},
		{"120", 100, 100, true},
		{"99999999999999999999999999", 1 << 31, 1 << 31, true},
		{"", 100, 0, false},
		{"-1", 100, 0, false},
		{"+1", 100, 0, false},
		{"1.5", 100, 0, false},
		{" 1", 100, 0, false},
		{"1e3", 100, 0, false},
	} {
		got, ok := DeltaSeconds(tt.in, tt.max)
		if got != tt.want || ok != tt.ok {
			t.Errorf("DeltaSeconds(%q, %d) = %d, %v; want %d, %v", tt.in, tt.max, got, ok, tt.want, tt.ok)
		}
	}
}

func TestPreferWait(t *testing.T) {
	t.Parallel()
	const max = 24 * time.Hour
	for _, tt := range []struct {
		lines        []string
		want         time.Duration
		found, valid bool
	}{
		{nil, 0, false, false},
		{[]string{"respond-async"}, 0, false, false},
		{[]string{"wait=5"}, 5 * time.Second, true, true},
		{[]string{"WAIT = 5"}, 5 * time.Second, true, true},
		{[]string{`wait="7"`}, 7 * time.Second, true, true},
		{[]string{"respond-async, wait=3;x=1"}, 3 * time.Second, true, true},
		{[]string{`handling="a,wait=9", wait=2`}, 2 * time.Second, true, true},
		{[]string{"respond-async", "wait=4"}, 4 * time.Second, true, true},
		{[]string{"wait=99999999999"}, max, true, true},
		{[]string{"wait"}, 0, true, false},
		{[]string{"wait=soon", "wait=3"}, 0, true, false},
		{[]string{"wait=-1"}, 0, true, false},
	} {
		d, found, ok := PreferWait(tt.lines, max)
		if d != tt.want || found != tt.found || ok != tt.valid {
			t.Errorf("PreferWait(%q) = %v, %v, %v; want %v, %v, %v", tt.lines, d, found, ok, tt.want, tt.found, tt.valid)
		}
	}
}

func FuzzDeltaSeconds(f *testing.F) {
	for _, s := range []string{"0", "120", "", "-1", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := DeltaSeconds(s, 1<<31)
		if !ok {
			if n != 0 {
				t.Fatalf("DeltaSeconds(%q) = %d, false: a refusal must be 0", s, n)
			}
			return
		}
		if s == "" || strings.Trim(s, "0123456789") != "" {
			t.Fatalf("DeltaSeconds(%q) accepted a value that is not all digits", s)
		}
		if n < 0 || n > 1<<31 {
			t.Fatalf("DeltaSeconds(%q) = %d, outside [0, 2^31]", s, n)
		}
	})
}

func FuzzPreferWait(f *testing.F) {
	for _, s := range []string{"wait=5", `wait="7"`, "respond-async, wait=3;x=1", `a="\"", wait=1`, "wait"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		const max = time.Hour
		d, found, ok := PreferWait([]string{s}, max)
		if ok && !found {
			t.Fatalf("PreferWait(%q): valid but not found", s)
		}
		if d < 0 || d > max || d%time.Second != 0 || (!ok && d != 0) {
			t.Fatalf("PreferWait(%q) = %v, %v: not whole seconds in [0, max]", s, d, ok)
		}
		if found && !strings.Contains(strings.ToLower(s), "wait") {
			t.Fatalf("PreferWait(%q) found a wait in a line without one", s)
		}
	})
}

func TestTrimOWS(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", " ": "", "\t a b \t": "a b", "a": "a", " \ta": "a", "a\t ": "a", "\na": "\na"} {
		if got := TrimOWS(in); got != want {
			t.Errorf("TrimOWS(%q) = %q, want %q", in, got, want)
		}
	}
}
