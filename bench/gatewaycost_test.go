package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testkit/servicetest"
)

// TestRunGatewayCost: a short section 8 measures every front (the Redis one
// where Redis answers), with ratios to the plain proxy (its own is 1), and
// writes its table.
func TestRunGatewayCost(t *testing.T) {
	res, err := RunGatewayCost(context.Background(), GatewayCostConfig{Batch: 2 * time.Millisecond, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if why, ok := res.Skipped[GatewayRedis]; ok {
		if servicetest.Required() {
			t.Errorf("the Redis front was skipped: %s", why)
		}
		t.Logf("the Redis front was skipped: %s", why)
	}
	if len(res.Rows)+len(res.Skipped) != len(GatewayFronts) || res.Ops < 1 || res.Rounds != 2 {
		t.Fatalf("%+v", res)
	}
	for _, row := range res.Rows {
		if row.NsPerOp <= 0 || row.Ratio.Median <= 0 || row.AllocsPerOp <= 0 {
			t.Errorf("%s: %+v", row.Front, row)
		}
	}
	if plain := res.Row(GatewayPlain); plain.Ratio != (Spread{1, 1, 1}) || plain.P != 1 {
		t.Errorf("the baseline's ratio to itself %v, p %v; want 1, 1", plain.Ratio, plain.P)
	}
	md := (&Report{Gateway: &res, GatewayCfg: GatewayCostConfig{Batch: 2 * time.Millisecond, Rounds: 2}}).Markdown()
	for _, want := range []string{"## 8. The gateway's cost on the success path", GatewayMemory, GatewayPlainFresh} {
		if !strings.Contains(md, want) {
			t.Errorf("section 8 lacks %q:\n%s", want, md)
		}
	}
}
