package memstore_test

import (
	"math"
	"testing"

	"github.com/idemkit/idem/server/memstore"
)

func TestOptionsPanic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"nil Option", func() { memstore.New(nil) }, "memstore: New(nil Option): want an Option"},
		{"WithClock nil", func() { memstore.WithClock(nil) }, "memstore: WithClock(nil): want a function"},
		{"WithMaxEntries 0", func() { memstore.WithMaxEntries(0) }, "memstore: WithMaxEntries(0): want n >= 1"},
		{"WithMaxEntries negative", func() { memstore.WithMaxEntries(-5) }, "memstore: WithMaxEntries(-5): want n >= 1"},
		{"WithMaxBytes 0", func() { memstore.WithMaxBytes(0) }, "memstore: WithMaxBytes(0): want n >= 1"},
		{"WithMaxBytes negative", func() { memstore.WithMaxBytes(-1) }, "memstore: WithMaxBytes(-1): want n >= 1"},
		{"WithScopeShare 0", func() { memstore.WithScopeShare(0) }, "memstore: WithScopeShare(0): want 0 < f <= 1"},
		{"WithScopeShare above 1", func() { memstore.WithScopeShare(1.5) }, "memstore: WithScopeShare(1.5): want 0 < f <= 1"},
		{"WithScopeShare NaN", func() { memstore.WithScopeShare(math.NaN()) }, "memstore: WithScopeShare(NaN): want 0 < f <= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if r := recover(); r != tt.want {
					t.Errorf("panic %#v, want %q", r, tt.want)
				}
			}()
			tt.f()
		})
	}
}
