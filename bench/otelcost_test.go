package bench

import (
	"strings"
	"testing"
	"time"
)

// TestOTelAllocs pins what the idemotel module allocates with the no-op
// providers and with the global ones before an SDK is installed: the
// allocations of one operation of section 7's workloads with it, less those
// of the same operation without it. That is the cost everyone pays, whether
// they export or not (the otel package doc promises it). No test of this
// package installs an SDK, so the global providers are the default ones.
func TestOTelAllocs(t *testing.T) {
	for _, c := range []struct {
		workload, variant string
		max               float64
	}{
		{OTelClientMemory, OTelNoop, 0},
		{OTelMiddleware, OTelNoop, 0},
		// The global tracer's non-recording span: its Start's own (see the
		// otel package doc for why the module does not skip it).
		{OTelClientMemory, OTelGlobals, 3},
		{OTelMiddleware, OTelGlobals, 0},
	} {
		t.Run(c.workload+"/"+c.variant, func(t *testing.T) {
			allocs := func(variant string) float64 {
				s := newOTelStack(c.workload, variant, "")
				defer s.close()
				return testing.AllocsPerRun(200, func() {
					if err := s.op(); err != nil {
						t.Fatalf("%s, %s: %v", c.workload, variant, err)
					}
				})
			}
			off, on := allocs(OTelOff), allocs(c.variant)
			if added := on - off; added > c.max {
				t.Errorf("%s with the %s providers: %.1f allocations per operation, %.1f without idemotel: %.1f added, want at most %.0f",
					c.workload, c.variant, on, off, added, c.max)
			}
		})
	}
}

// TestRunOTelCost: a short section 7 measures every workload in every
// variant, with ratios to off (off's own is 1) and allocations, and writes
// its tables.
func TestRunOTelCost(t *testing.T) {
	res, err := RunOTelCost(OTelCostConfig{Batch: 2 * time.Millisecond, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(OTelWorkloads) {
		t.Fatalf("%d workloads, want %d", len(res), len(OTelWorkloads))
	}
	for i, o := range res {
		if o.Workload != OTelWorkloads[i] || o.Ops < 1 || o.Rounds != 2 || len(o.Rows) != len(OTelVariants) {
			t.Fatalf("workload %d: %+v", i, o)
		}
		for j, row := range o.Rows {
			if row.Variant != OTelVariants[j] || row.NsPerOp <= 0 || row.AllocsPerOp <= 0 || row.Ratio.Median <= 0 {
				t.Errorf("%s, %s: %+v", o.Workload, OTelVariants[j], row)
			}
		}
		if off := o.Row(OTelOff); off.Ratio != (Spread{1, 1, 1}) || off.P != 1 {
			t.Errorf("%s: off's ratio to itself %v, p %v; want 1, 1", o.Workload, off.Ratio, off.P)
		}
		// The SDK samples every attempt's span: the client allocates more
		// than off, whatever the timings. (The middleware's metrics, on
		// attribute sets built once, allocate nothing.)
		if o.Workload != OTelMiddleware && o.addedAllocs(OTelSDK) <= 0 {
			t.Errorf("%s: the SDK adds %v allocations per operation, want some", o.Workload, o.addedAllocs(OTelSDK))
		}
	}
	md := (&Report{OTel: res, OTelCfg: OTelCostConfig{Batch: 2 * time.Millisecond, Rounds: 2}}).Markdown()
	for _, want := range append([]string{"## 7. The cost of OpenTelemetry", "off again ÷ off (noise)"}, OTelWorkloads...) {
		if !strings.Contains(md, want) {
			t.Errorf("section 7 lacks %q:\n%s", want, md)
		}
	}
}
