package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testkit/servicetest"
)

// TestQuickRun runs every section (1 to 9) in quick mode, as `go run ./cmd/bench -quick`
// does, and checks that the outputs exist and that the invariants hold: idem's
// client on idem's server never charges twice, and the retry budget keeps the
// attempts per call of a storm well below MaxAttempts.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("the quick run takes tens of seconds")
	}
	out := t.TempDir()
	rep, err := Run(context.Background(), Config{Quick: true, Out: out, Command: "go test -run TestQuickRun", Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("outputs", func(t *testing.T) {
		md, err := os.ReadFile(filepath.Join(out, ResultsFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7.", "## 8.", "## 9.", "cores", "go1.", "go test -run TestQuickRun"} {
			if !bytes.Contains(md, []byte(want)) {
				t.Errorf("%s lacks %q", ResultsFile, want)
			}
		}
		for _, name := range []string{ChartContentionCalls, ChartContentionTime, ChartStorm, ChartServer} {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Error(err)
				continue
			}
			if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) > 100<<10 {
				t.Errorf("%s: not a small PNG (%d bytes)", name, len(b))
			}
		}
	})

	t.Run("overhead", func(t *testing.T) {
		// Both targets, every case, every contender and the control.
		if want := 2 * len(OverheadCases()) * (len(OverheadContenders()) + 1); len(rep.Overhead) != want {
			t.Fatalf("%d overhead rows, want %d", len(rep.Overhead), want)
		}
		for _, o := range rep.Overhead {
			if o.NsPerOp <= 0 || o.AllocsPerOp <= 0 {
				t.Errorf("%s over %v: %v ns/op, %d allocs/op", o.Name, o.Target, o.NsPerOp, o.AllocsPerOp)
			}
		}
	})

	t.Run("OpenTelemetry", func(t *testing.T) {
		// Every workload in every variant, timed, with ratios to off.
		if len(rep.OTel) != len(OTelWorkloads) {
			t.Fatalf("%d workloads, want %d", len(rep.OTel), len(OTelWorkloads))
		}
		for _, o := range rep.OTel {
			if len(o.Rows) != len(OTelVariants) {
				t.Errorf("%s: %d rows, want %d", o.Workload, len(o.Rows), len(OTelVariants))
			}
			for _, row := range o.Rows {
				if row.NsPerOp <= 0 || row.Ratio.Median <= 0 || row.AllocsPerOp <= 0 {
					t.Errorf("%s, %s: %+v", o.Workload, row.Variant, row)
				}
			}
		}
	})

	t.Run("idem never charges twice", func(t *testing.T) {
		seen := 0
		for _, f := range rep.Faults {
			if f.Client.Name != "idem" || f.Client.Route != RouteKeyed {
				continue
			}
			seen++
			if f.Duplicates != 0 || f.Payments > f.Ops {
				t.Errorf("%s: idem on %s made %d payments for %d operations (%d duplicates)",
					f.Scenario, f.Client.Route, f.Payments, f.Ops, f.Duplicates)
			}
			if f.Attempts < f.Ops {
				t.Errorf("%s: %d attempts for %d operations", f.Scenario, f.Attempts, f.Ops)
			}
		}
		if seen != len(rep.FaultCfg.Scenarios) {
			t.Errorf("%d idem rows on %s, want one per scenario (%d)", seen, RouteKeyed, len(rep.FaultCfg.Scenarios))
		}
	})

	t.Run("retry budget bounds the storm", func(t *testing.T) {
		st := rep.Storm
		if st == nil {
			t.Fatal("no storm result")
		}
		limit := float64(st.Config.MaxAttempts) / 2
		if got := st.Budget.OutageAttemptsPerCall(); got >= limit || got < 1 {
			t.Errorf("with the budget: %.2f attempts per call in the outage, want in [1, %.1f)", got, limit)
		}
		// Without the budget the calls retry until MaxAttempts or the time cap,
		// which a loaded machine reaches sooner: logged, not asserted.
		t.Logf("attempts per call in the outage: %.2f without the budget, %.2f with it",
			st.NoBudget.OutageAttemptsPerCall(), st.Budget.OutageAttemptsPerCall())
		if st.NoBudget.RetriesDenied != 0 {
			t.Errorf("%d retries denied without a budget", st.NoBudget.RetriesDenied)
		}
	})

	t.Run("a server that does not implement keys", func(t *testing.T) {
		if want := len(rep.ForeignCfg.Scenarios) * len(ForeignClients()); len(rep.Foreign) != want {
			t.Fatalf("%d rows, want %d", len(rep.Foreign), want)
		}
		for _, f := range rep.Foreign {
			if f.Ops == 0 || f.Requests < f.Ops || f.Completed > f.Ops || f.SetupFailures != 0 {
				t.Errorf("%s, %s: %d operations, %d requests, %d completed, %d originals failed",
					f.Client, f.Scenario.Name, f.Ops, f.Requests, f.Completed, f.SetupFailures)
			}
			t.Logf("%s, %s: %d / %d completed, %.2f requests per operation, outcome p99 %s",
				f.Client, f.Scenario.Name, f.Completed, f.Ops, f.RequestsPerOp(), opTime(f.OutcomeP99))
			// The peers' counts depend on their rules alone, not on timing.
			want := map[string]map[ForeignKind]float64{
				"go-retryablehttp": {ForeignConflict: 1, ForeignInProgress: 1, ForeignSustained: 5},
				"failsafe-go":      {ForeignConflict: 1, ForeignInProgress: 1, ForeignSustained: 3, ForeignOutage: 3, ForeignRefused: 3},
			}
			if n, ok := want[f.Client][f.Scenario.Kind]; ok && f.RequestsPerOp() != n {
				t.Errorf("%s, %s: %.2f requests per operation, want %.0f", f.Client, f.Scenario.Name, f.RequestsPerOp(), n)
			}
		}
	})

	t.Run("server", func(t *testing.T) {
		sv := rep.Server
		if sv == nil {
			t.Fatal("no server result")
		}
		for _, r := range sv.Rows {
			if r.Requests == 0 || r.Errors != 0 || r.P99 < r.P50 || r.Ratio <= 0 {
				t.Errorf("%s, %s, %s: %d requests, %d errors (first: %s), p50 %v, p99 %v, ratio %.2f",
					r.Label(), r.Case, r.Mode, r.Requests, r.Errors, r.FirstError, r.P50, r.P99, r.Ratio)
			}
		}
		for _, st := range ServerStores() {
			name, _, _ := strings.Cut(st.Name, " (")
			t.Run(name, func(t *testing.T) {
				for _, env := range st.Env {
					// An optional topology that is not set up skips, even in CI.
					servicetest.Optional(t, env, "section 5 did not measure "+st.Name)
				}
				if why, skipped := sv.Skipped[st.Name]; skipped {
					servicetest.Unreachable(t, "%s not measured: %s", st.Name, why)
				}
				var rows []ServerLoadResult
				for _, r := range sv.Rows {
					if r.Store == st.Name {
						rows = append(rows, r)
					}
				}
				if len(rows) != 4 {
					t.Fatalf("%d rows, want 4 (new key and replay, sequential and parallel): %+v", len(rows), rows)
				}
				for _, r := range rows {
					t.Logf("%s, %s: %.2f × %s, p50 %+v, p99 %+v, %.2f round trips per request (%+.2f)",
						r.Case, r.Mode, r.Ratio, r.Baseline, r.AddedP50, r.AddedP99, r.RoundTrips, r.AddedRoundTrips)
					if st.Name == StoreRedis && !meetsRedisTrips(r) {
						t.Errorf("%s, %s: %.3f round trips to Redis per request, want at most %v",
							r.Case, r.Mode, r.RoundTrips, redisTripsTarget(r.Case))
					}
				}
			})
		}
	})
}
