package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunGRPCCost: a short section 9 measures every caller, with ratios to
// the bare call (its own is 1), and writes its table.
func TestRunGRPCCost(t *testing.T) {
	cfg := GRPCCostConfig{Batch: 2 * time.Millisecond, Rounds: 2}
	res, err := RunGRPCCost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != len(GRPCCallers) || res.Ops < 1 || res.Rounds != 2 {
		t.Fatalf("%+v", res)
	}
	for _, row := range res.Rows {
		if row.NsPerOp <= 0 || row.Ratio.Median <= 0 || row.AllocsPerOp <= 0 {
			t.Errorf("%s: %+v", row.Front, row)
		}
	}
	if bare := res.Row(GRPCBare); bare.Ratio != (Spread{1, 1, 1}) || bare.P != 1 {
		t.Errorf("the baseline's ratio to itself %v, p %v; want 1, 1", bare.Ratio, bare.P)
	}
	// idem's server interceptor claims and records: it cannot cost less than
	// the client alone by more than the noise of two rounds allows.
	if both, client := res.Row(GRPCIdemBoth), res.Row(GRPCIdemClient); both.AllocsPerOp <= client.AllocsPerOp {
		t.Errorf("client and server %.0f allocations per call, the client alone %.0f: the server interceptor did not run",
			both.AllocsPerOp, client.AllocsPerOp)
	}
	md := (&Report{GRPC: &res, GRPCCfg: cfg}).Markdown()
	for _, want := range []string{"## 9. A gRPC call's cost on the success path", GRPCMiddleware, GRPCIdemBoth} {
		if !strings.Contains(md, want) {
			t.Errorf("section 9 lacks %q:\n%s", want, md)
		}
	}
}

// TestPeerVersions: RESULTS.md names each peer with the version measured.
func TestPeerVersions(t *testing.T) {
	got := peerVersions()
	for _, p := range peers {
		if !strings.Contains(got, p.path+" v") {
			t.Errorf("the peers' line lacks %s's version: %s", p.path, got)
		}
	}
}
