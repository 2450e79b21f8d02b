package server

import (
	"net/http"
	"testing"
)

func TestHeaderSet(t *testing.T) {
	t.Parallel()
	s := headerSet{"Content-Type", "Location", "Etag"}.with("X-Custom", "Location")
	if len(s) != 4 || !s.has("X-Custom") || s.has("x-custom") {
		t.Fatalf("with: %v", s)
	}
	tests := []struct {
		name string
		h    http.Header
		want bool
	}{
		{"nil", nil, true},
		{"empty", http.Header{}, true},
		{"all allowed", http.Header{"Content-Type": {"a"}, "Etag": {"b"}}, true},
		{"every name", http.Header{"Content-Type": nil, "Location": nil, "Etag": nil, "X-Custom": nil}, true},
		{"one not allowed", http.Header{"Content-Type": {"a"}, "Set-Cookie": {"b"}}, false},
		{"non-canonical spelling", http.Header{"etag": {"b"}}, false},
		{"more names than the set", http.Header{"A": nil, "B": nil, "C": nil, "D": nil, "E": nil}, false},
	}
	for _, tt := range tests {
		if got := s.holdsAll(tt.h); got != tt.want {
			t.Errorf("%s: holdsAll = %v, want %v", tt.name, got, tt.want)
		}
	}
}
