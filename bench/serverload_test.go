package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1}, 2},
		{[]float64{9, 1, 5}, 5},
		{[]float64{100, 1, 2, 3}, 2.5}, // one stalled (or lucky) round does not decide it
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// A store that cannot be opened is skipped and named; the others are measured
// against their baseline, in both modes.
func TestRunServerLoadSkipsUnreachable(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	stores := []StoreTarget{
		{Name: "down", Open: func(context.Context, int) (*StoreRig, error) { return nil, down }},
		{Name: StoreMemory, Open: openMemory},
	}
	cfg := ServerLoadConfig{Workers: 2, Duration: 20 * time.Millisecond, Rounds: 1}
	rep, err := RunServerLoad(context.Background(), cfg, stores)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Skipped["down"]; got != down.Error() {
		t.Errorf("Skipped[down] = %q, want %q", got, down.Error())
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, fmt.Sprintf("%s/%s/%s/%d", r.Mode, r.Label(), r.Case, r.Workers))
		if r.Case == CaseBaseline && (r.Ratio != 1 || r.AddedP99 != 0) {
			t.Errorf("%s baseline: ratio %v, added p99 %v", r.Mode, r.Ratio, r.AddedP99)
		}
		if r.Requests == 0 || r.RoundTrips != 0 {
			t.Errorf("%s/%s/%s: %d requests, %v round trips", r.Mode, r.Label(), r.Case, r.Requests, r.RoundTrips)
		}
	}
	want := []string{
		"sequential/" + BaselineBare + "/baseline/1", "sequential/" + StoreMemory + "/new key/1", "sequential/" + StoreMemory + "/replay/1",
		"parallel/" + BaselineBare + "/baseline/2", "parallel/" + StoreMemory + "/new key/2", "parallel/" + StoreMemory + "/replay/2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	rep, err = RunServerLoad(context.Background(), cfg, stores[:1])
	if err != nil || len(rep.Rows) != 0 || len(rep.Skipped) != 1 {
		t.Errorf("no store reachable: %d rows, skipped %v, error %v", len(rep.Rows), rep.Skipped, err)
	}
}
