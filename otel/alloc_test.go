package idemotel_test

import "testing"

// TestNoopAllocs pins what the instrumentation allocates with the no-op
// providers: the allocations of one operation with it, less those of the
// same operation without it. The no-op providers are what an application
// gets until it installs an SDK, so their cost is the one everyone pays.
func TestNoopAllocs(t *testing.T) {
	// The middleware's keys are numbered: past 99, formatting one allocates
	// alike in every variant.
	benchKeys.Add(1000)
	for _, c := range []struct {
		name string
		mk   func(variant string) func() error
		max  float64
	}{{"client", clientOp, 0}, {"middleware", middlewareOp, 0}} {
		t.Run(c.name, func(t *testing.T) {
			allocs := func(variant string) float64 {
				op := c.mk(variant)
				return testing.AllocsPerRun(200, func() {
					if err := op(); err != nil {
						t.Fatalf("%s %s: %v", c.name, variant, err)
					}
				})
			}
			off, noop := allocs("off"), allocs("noop")
			if added := noop - off; added > c.max {
				t.Errorf("%s with the no-op providers: %.1f allocations per operation, %.1f without idemotel: %.1f added, want at most %.0f",
					c.name, noop, off, added, c.max)
			}
		})
	}
}
