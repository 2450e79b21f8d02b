package idem

import "testing"

func TestJitterValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		j     Jitter
		want  string
		valid bool
	}{
		{FullJitter, "FullJitter", true},
		{EqualJitter, "EqualJitter", true},
		{DecorrelatedJitter, "DecorrelatedJitter", true},
		{NoJitter, "NoJitter", true},
		{Jitter(4), "Jitter(4)", false},
		{Jitter(-1), "Jitter(-1)", false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.j.valid(); got != tt.valid {
				t.Errorf("valid() = %v, want %v", got, tt.valid)
			}
		})
	}
	var zero Jitter
	if zero != FullJitter {
		t.Errorf("zero Jitter = %v, want FullJitter", zero)
	}
}
