package idemotel

import (
	"net/http"
	"strings"
	"testing"
)

func TestPatternRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pattern, want string }{
		{"", ""},
		{"/payments", "/payments"},
		{"POST /payments", "/payments"},
		{"POST  /payments/{id}", "/payments/{id}"},
		{"POST example.com/payments/{id...}", "/payments/{id...}"},
		{"example.com/", "/"},
		{"GET /", "/"},
		{"GET", ""},
		{"example.com", ""},
		{"/ 0", "/ 0"}, // not a pattern ServeMux accepts, but no method either
	} {
		if got := patternRoute(&http.Request{Pattern: tc.pattern}); got != tc.want {
			t.Errorf("patternRoute(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// FuzzPatternRoute: whatever the pattern, the route is empty or a path
// (starting with /) taken from it, with no method or host before it.
func FuzzPatternRoute(f *testing.F) {
	for _, p := range []string{"", "/x", "POST /x/{id}", "GET h.test/x", "POST\t/x", " /x", "GET"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		got := patternRoute(&http.Request{Pattern: pattern})
		if got == "" {
			return
		}
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("patternRoute(%q) = %q, not a path", pattern, got)
		}
		if !strings.HasSuffix(pattern, got) {
			t.Fatalf("patternRoute(%q) = %q, not a tail of the pattern", pattern, got)
		}
	})
}
