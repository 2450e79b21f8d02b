package bench

import (
	"context"
	"crypto/rand"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkOverhead measures the success path of every client stack against one
// local server, in every case of OverheadCases, in the same run; compare each
// with "bare" of the same case:
//
//	go test -run '^$' -bench Overhead -benchmem -count 5
func BenchmarkOverhead(b *testing.B) {
	srv := newOverheadServer()
	defer srv.Close()
	for _, cs := range OverheadCases() {
		for _, c := range OverheadContenders() {
			b.Run(cs.String()+"/"+c.Name, func(b *testing.B) {
				if err := benchContender(b, c, Loopback, srv.URL, cs); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkOverheadInMemory measures the same client stacks over a
// RoundTripper that answers in memory, which leaves only the retry layer's own
// cost (and the shared cost of building the request and reading the reply).
func BenchmarkOverheadInMemory(b *testing.B) {
	for _, cs := range OverheadCases() {
		for _, c := range OverheadContenders() {
			b.Run(cs.String()+"/"+c.Name, func(b *testing.B) {
				if err := benchContender(b, c, InMemory, "http://in-memory.invalid/payments", cs); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkOverheadPaired alternates one POST through idem and one through
// go-retryablehttp in every iteration, in every case of OverheadCases, and
// reports the ratio of their times: load from elsewhere on the machine weighs
// on both alike, so the ratio is steadier than two separate benchmarks.
//
//	go test -run '^$' -bench OverheadPaired -count 5
func BenchmarkOverheadPaired(b *testing.B) {
	srv := newOverheadServer()
	defer srv.Close()
	var idemC, rhC Contender
	for _, c := range OverheadContenders() {
		switch c.Name {
		case "idem":
			idemC = c
		case "go-retryablehttp":
			rhC = c
		}
	}
	for _, cs := range OverheadCases() {
		b.Run(cs.String(), func(b *testing.B) {
			a := newOverheadStack(idemC, Loopback, cs)
			r := newOverheadStack(rhC, Loopback, cs)
			defer a.close()
			defer r.close()
			ctx := context.Background()
			var ta, tr time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := postPayment(ctx, a.client, srv.URL, a.key, a.deadline); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := postPayment(ctx, r.client, srv.URL, r.key, r.deadline); err != nil {
					b.Fatal(err)
				}
				ta += t1.Sub(t0)
				tr += time.Since(t1)
			}
			b.ReportMetric(float64(ta)/float64(tr), "idem/go-retryablehttp")
		})
	}
}

// BenchmarkOverheadWireCost measures, over loopback and with no retry layer
// at all, what the headers idem's contract makes it send cost a request (the
// server, in the same process, parses them): bare http.Client POSTs, with the
// caller's constant Idempotency-Key, with a new random UUID key per request
// (what idem generates for a POST with none), with 16 random bytes read and
// the constant key (the random read alone), and with the constant key and
// Prefer: wait=8 (what idem adds to a caller's key), every header set by the
// caller. Each stack runs a batch in turn in every iteration, and the ratios
// to bare are of their summed times, so that load from elsewhere weighs on
// all of them alike:
//
//	go test -run '^$' -bench OverheadWireCost -count 6 -benchtime 3s
func BenchmarkOverheadWireCost(b *testing.B) {
	srv := newOverheadServer()
	defer srv.Close()
	var random [16]byte
	variants := []struct {
		name  string
		key   func() string
		extra []string
	}{
		{"bare", func() string { return "" }, nil},
		{"key", func() string { return overheadKey }, nil},
		{"new-uuid-key", uuid.NewString, nil},
		{"random-read+key", func() string { _, _ = rand.Read(random[:]); return overheadKey }, nil},
		{"key+prefer", func() string { return overheadKey }, []string{"Prefer", "wait=8"}},
	}
	stacks := make([]overheadStack, len(variants))
	for i := range variants {
		stacks[i] = newOverheadStack(OverheadContenders()[0], Loopback, OverheadCase{Deadline: ContextDeadline})
		defer stacks[i].close()
	}
	ctx := context.Background()
	took := make([]time.Duration, len(stacks))
	for b.Loop() {
		for i, s := range stacks {
			v := variants[i]
			t0 := time.Now()
			for range 5 {
				if err := postPayment(ctx, s.client, srv.URL, v.key(), s.deadline, v.extra...); err != nil {
					b.Fatal(err)
				}
			}
			took[i] += time.Since(t0)
		}
	}
	for i := 1; i < len(stacks); i++ {
		b.ReportMetric(float64(took[i])/float64(took[0]), variants[i].name+"/bare")
	}
}

// TestMannWhitneyP pins the test to values computed outside Go (the normal
// approximation with continuity and tie corrections, as
// scipy.stats.mannwhitneyu(method="asymptotic") computes it).
func TestMannWhitneyP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		x, y []float64
		want float64
	}{
		{"apart", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 0.012185780355344818},
		{"apart, the other way", []float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 0.012185780355344818},
		{"ties", []float64{1, 2, 2, 3}, []float64{2, 3, 4, 5}, 0.13665824773814753},
		{"interleaved", []float64{1, 4, 5, 8}, []float64{2, 3, 6, 7}, 1},
		{"shifted by one", []float64{1, 3, 5, 7}, []float64{2, 4, 6, 8}, 0.6650055421020291},
		{"all equal", []float64{1, 1, 1}, []float64{1, 1, 1}, 1},
		{"empty", nil, []float64{1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mannWhitneyP(tt.x, tt.y); math.Abs(got-tt.want) > 1e-12 && !(tt.want == 1 && got >= 1) {
				t.Errorf("mannWhitneyP = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	xs := []float64{4, 1, 3, 2, 5}
	for _, tt := range []struct{ q, want float64 }{{0, 1}, {0.25, 2}, {0.5, 3}, {0.75, 4}, {1, 5}, {0.125, 1.5}} {
		if got := quantile(xs, tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if xs[0] != 4 {
		t.Errorf("quantile sorted its argument: %v", xs)
	}
	if got := quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}

// TestCompareOverhead: the ratios are taken within each round, and the
// verdict compares them with the control's.
func TestCompareOverhead(t *testing.T) {
	t.Parallel()
	cs := OverheadCase{}
	row := func(name string, perRound ...float64) OverheadResult {
		return OverheadResult{Target: InMemory, Case: cs, Name: name, PerRound: perRound}
	}
	// The machine slows down from round to round; a is 10% slower than b in
	// every round, the control as fast as bare give or take 1%.
	load := []float64{1, 1.5, 0.8, 2, 1.2, 1.1, 0.9, 1.3}
	scale := func(f float64, jitter ...float64) []float64 {
		out := make([]float64, len(load))
		for i, l := range load {
			out[i] = 1000 * l * f * jitter[i%len(jitter)]
		}
		return out
	}
	rows := []OverheadResult{
		row("bare", scale(1, 1)...),
		row("a", scale(1.1, 1)...),
		row("b", scale(1, 1)...),
		row("c", scale(1, 1.01, 0.99)...),
		row(ControlName, scale(1, 0.99, 1.01)...),
	}
	got := CompareOverhead(rows, "a", "b")
	if len(got) != 1 {
		t.Fatalf("%d comparisons, want 1", len(got))
	}
	c := got[0]
	if c.Rounds != len(load) || math.Abs(c.Ratio.Median-1.1) > 1e-9 || c.Ratio.Q1 != c.Ratio.Q3 {
		t.Errorf("a ÷ b: %+v over %d rounds, want 1.1 in every round", c.Ratio, c.Rounds)
	}
	if math.Abs(c.Control.Median-1) > 0.011 {
		t.Errorf("control: %+v, want about 1", c.Control)
	}
	if c.WithinNoise() || c.Verdict() != "a slower" {
		t.Errorf("a 10%% slower in every round: p %v, verdict %q", c.P, c.Verdict())
	}
	if c := CompareOverhead(rows, "c", "b")[0]; !c.WithinNoise() || c.Verdict() != "within noise" {
		t.Errorf("c as noisy as the control: p %v, verdict %q", c.P, c.Verdict())
	}
	if c := CompareOverhead(rows, "b", "a")[0]; c.Verdict() != "b faster" {
		t.Errorf("b ÷ a: verdict %q", c.Verdict())
	}
	for i := range rows {
		rows[i].PerRound = rows[i].PerRound[:3]
	}
	if c := CompareOverhead(rows, "a", "b")[0]; c.WithinNoise() || c.Verdict() != "too few rounds to tell" {
		t.Errorf("3 rounds: verdict %q", c.Verdict())
	}
	if got := CompareOverhead(rows, "a", "nobody"); len(got) != 0 {
		t.Errorf("a contender that is not there: %+v", got)
	}
}

// TestRunOverhead runs section 1 at its smallest: every configuration gives
// every contender and the control a row with one sample per round.
func TestRunOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for about a second")
	}
	rows, err := RunOverhead(OverheadConfig{Block: time.Millisecond, Rounds: 2}, OverheadContenders())
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(OverheadCases()) * (len(OverheadContenders()) + 1); len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	for _, r := range rows {
		if len(r.PerRound) != 2 || r.NsPerOp <= 0 || r.AllocsPerOp <= 0 || r.NsRatio <= 0 {
			t.Errorf("%v, %v, %s: %+v", r.Target, r.Case, r.Name, r)
		}
	}
	if got := CompareOverhead(rows, "idem", "go-retryablehttp"); len(got) != 2*len(OverheadCases()) {
		t.Errorf("%d comparisons, want one per configuration", len(got))
	}
	if _, err := RunOverhead(OverheadConfig{}, OverheadContenders()); err == nil {
		t.Error("RunOverhead without Rounds and Block: no error")
	}
}

// TestOwnCapCase pins the like-with-like cases of section 1: the contender that
// caps itself (idem) runs with no caller deadline and its own bound, every
// other stack, the control included, with that bound as a context deadline.
func TestOwnCapCase(t *testing.T) {
	t.Parallel()
	contenders := append(OverheadContenders(), Contender{Name: ControlName, New: OverheadContenders()[0].New})
	for _, callerKey := range []bool{false, true} {
		cs := OverheadCase{CallerKey: callerKey, Deadline: OwnCap}
		for _, c := range contenders {
			s := newOverheadStack(c, InMemory, cs)
			wantDeadline := overheadCap
			if c.Name == "idem" {
				wantDeadline = 0
				if c.Capped == nil {
					t.Fatal("idem has no Capped constructor")
				}
			} else if c.Capped != nil {
				t.Errorf("%s: Capped set, want only idem to cap itself", c.Name)
			}
			if s.deadline != wantDeadline {
				t.Errorf("%v, %s: context deadline %v, want %v", cs, c.Name, s.deadline, wantDeadline)
			}
			if wantKey := map[bool]string{true: overheadKey}[callerKey]; s.key != wantKey {
				t.Errorf("%v, %s: key %q, want %q", cs, c.Name, s.key, wantKey)
			}
			if s.client.Timeout != 0 {
				t.Errorf("%v, %s: Client.Timeout %v, want none", cs, c.Name, s.client.Timeout)
			}
			if err := postPayment(context.Background(), s.client, "http://in-memory.invalid/payments", s.key, s.deadline); err != nil {
				t.Errorf("%v, %s: %v", cs, c.Name, err)
			}
			s.close()
		}
	}
	// The other cases treat every stack alike.
	for _, cs := range OverheadCases() {
		if cs.Deadline == OwnCap {
			continue
		}
		var deadlines []time.Duration
		for _, c := range contenders {
			_, d := cs.request(c)
			deadlines = append(deadlines, d)
		}
		for _, d := range deadlines[1:] {
			if d != deadlines[0] {
				t.Errorf("%v: deadlines differ between stacks: %v", cs, deadlines)
				break
			}
		}
	}
}
