package idemotel_test

import "testing"

// TestNoopAllocs pins what the instrumentation allocates with the no-op
// providers and with the global ones before an SDK is installed: the
// allocations of one operation with it, less those of the same operation
// without it. That is the cost everyone pays, whether they export or not.
func TestNoopAllocs(t *testing.T) {
	// The middleware's keys are numbered: past 99, formatting one allocates
	// alike in every variant.
	benchKeys.Add(1000)
	for _, c := range []struct {
		name, variant string
		mk            func(variant string) func() error
		max           float64
	}{
		{"client", "noop", clientOp, 0},
		{"middleware", "noop", middlewareOp, 0},
		// The global tracer's non-recording span, its Start's own.
		{"client", "globals", clientOp, 3},
		{"middleware", "globals", middlewareOp, 0},
	} {
		t.Run(c.name+"/"+c.variant, func(t *testing.T) {
			allocs := func(variant string) float64 {
				op := c.mk(variant)
				return testing.AllocsPerRun(200, func() {
					if err := op(); err != nil {
						t.Fatalf("%s %s: %v", c.name, variant, err)
					}
				})
			}
			off, on := allocs("off"), allocs(c.variant)
			if added := on - off; added > c.max {
				t.Errorf("%s with the %s providers: %.1f allocations per operation, %.1f without idemotel: %.1f added, want at most %.0f",
					c.name, c.variant, on, off, added, c.max)
			}
		})
	}
}
