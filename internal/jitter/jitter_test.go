package jitter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

var _ backoff.BackOff = func() *Backoff { b := New(Full, time.Millisecond, time.Second, nil); return &b }()

// almostOne is the largest float64 below 1, the top of a [0, 1) random source.
const almostOne = 0.9999999999999999

const maxDuration = time.Duration(math.MaxInt64)

func TestCapExp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		base, max time.Duration
		n         int
		want      time.Duration
	}{
		{"first", 300 * time.Millisecond, 10 * time.Second, 0, 300 * time.Millisecond},
		{"second", 300 * time.Millisecond, 10 * time.Second, 1, 600 * time.Millisecond},
		{"fifth", 300 * time.Millisecond, 10 * time.Second, 4, 4800 * time.Millisecond},
		{"capped", 300 * time.Millisecond, 10 * time.Second, 6, 10 * time.Second},
		{"exactly max", time.Second, 8 * time.Second, 3, 8 * time.Second},
		{"negative n", time.Second, 8 * time.Second, -3, time.Second},
		{"base above max", 20 * time.Second, 10 * time.Second, 0, 10 * time.Second},
		{"n=62 saturates", 1, maxDuration, 62, 1 << 62},
		{"n=63 saturates", 1, maxDuration, 63, maxDuration},
		{"n=64", 1, maxDuration, 64, maxDuration},
		{"n=1000", time.Second, time.Hour, 1000, time.Hour},
		{"n=MaxInt", time.Second, time.Hour, math.MaxInt, time.Hour},
		{"huge base", maxDuration - 1, maxDuration, 1, maxDuration},
		{"huge base n=1000", maxDuration / 2, maxDuration, 1000, maxDuration},
		{"zero base", 0, time.Second, 5, 0},
		{"zero max", time.Second, 0, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := CapExp(tt.base, tt.max, tt.n); got != tt.want {
				t.Errorf("CapExp(%v, %v, %d) = %v, want %v", tt.base, tt.max, tt.n, got, tt.want)
			}
		})
	}
}

func TestScaleDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    time.Duration
		r    float64
		want time.Duration
	}{
		{"zero r", time.Second, 0, 0},
		{"half", time.Second, 0.5, 500 * time.Millisecond},
		{"almost one", time.Second, almostOne, time.Second - 1},
		{"one clamps", time.Second, 1, time.Second - 1},
		{"above one clamps", time.Second, 7, time.Second - 1},
		{"negative clamps", time.Second, -0.5, 0},
		{"NaN", time.Second, math.NaN(), 0},
		{"zero d", 0, 0.5, 0},
		{"negative d", -time.Second, 0.5, 0},
		{"max d almost one", maxDuration, almostOne, maxDuration - 1023},
		{"max d one", maxDuration, 1, maxDuration - 1},
		// float64(1<<62+1) rounds to 1<<62; the product must stay below d.
		{"unrepresentable d", 1<<62 + 1, almostOne, 1<<62 - 512},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Scale(tt.d, tt.r)
			if got != tt.want {
				t.Errorf("Scale(%d, %v) = %d, want %d", tt.d, tt.r, got, tt.want)
			}
		})
	}
}

func TestJitterFormulasFixedR(t *testing.T) {
	t.Parallel()
	const (
		base = 100 * time.Millisecond
		max  = time.Second
	)
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"full r=0 n=0", FullWait(base, max, 0, 0), 0},
		{"full r=.5 n=0", FullWait(base, max, 0, 0.5), 50 * time.Millisecond},
		{"full r=.5 n=2", FullWait(base, max, 2, 0.5), 200 * time.Millisecond},
		{"full r=.5 n=10 capped", FullWait(base, max, 10, 0.5), 500 * time.Millisecond},
		{"full r≈1 n=0", FullWait(base, max, 0, almostOne), base - 1},
		{"full r≈1 n=1000", FullWait(base, max, 1000, almostOne), max - 1},
		{"equal r=0 n=0", EqualWait(base, max, 0, 0), 50 * time.Millisecond},
		{"equal r=.5 n=0", EqualWait(base, max, 0, 0.5), 75 * time.Millisecond},
		{"equal r=.5 n=3", EqualWait(base, max, 3, 0.5), 600 * time.Millisecond},
		{"equal r≈1 n=10", EqualWait(base, max, 10, almostOne), max - 1},
		{"equal odd v r≈1", EqualWait(3, 100, 0, almostOne), 2},
		{"equal odd v r=0", EqualWait(3, 100, 0, 0), 1},
		{"decorrelated r=0", DecorrelatedWait(base, max, base, 0), base},
		{"decorrelated r=.5 prev=base", DecorrelatedWait(base, max, base, 0.5), 200 * time.Millisecond},
		{"decorrelated r≈1 prev=base", DecorrelatedWait(base, max, base, almostOne), 300*time.Millisecond - 1},
		{"decorrelated r=.5 prev=300ms", DecorrelatedWait(base, max, 300*time.Millisecond, 0.5), 500 * time.Millisecond},
		{"decorrelated capped", DecorrelatedWait(base, max, 900*time.Millisecond, 0.5), max},
		{"decorrelated base above max", DecorrelatedWait(2*time.Second, max, base, 0.5), max},
		{"decorrelated prev below base/3", DecorrelatedWait(base, max, 10*time.Millisecond, 0.5), base},
		// prev*3 saturates; float64(MaxInt64-100ms) rounds to 2^63-99999744, and
		// almostOne times that is one float step (1024ns) lower.
		{"decorrelated huge prev", DecorrelatedWait(base, maxDuration, maxDuration, almostOne), maxDuration - 767},
		{"decorrelated zero base", DecorrelatedWait(0, max, 0, 0.5), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Errorf("got %v (%d), want %v (%d)", tt.got, tt.got, tt.want, tt.want)
			}
		})
	}
}

func TestNewSequences(t *testing.T) {
	t.Parallel()
	const (
		base = 100 * time.Millisecond
		max  = time.Second
	)
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		j    Kind
		r    float64
		want []time.Duration
	}{
		{Full, 0.5, ms(50, 100, 200, 400, 500, 500, 500)},
		{Equal, 0.5, ms(75, 150, 300, 600, 750, 750, 750)},
		{None, 0.5, ms(100, 200, 400, 800, 1000, 1000, 1000)},
		{None, 0, ms(100, 200, 400, 800, 1000, 1000, 1000)},
		// prev: 100 -> U[100,300)@.5 = 200 -> U[100,600)@.5 = 350 -> U[100,1050)@.5 = 575
		// -> U[100,1725)@.5 = 912.5 -> U[100,2737.5)@.5 capped at 1000 -> stays there.
		{Decorrelated, 0.5, []time.Duration{
			200 * time.Millisecond, 350 * time.Millisecond, 575 * time.Millisecond,
			912500 * time.Microsecond, time.Second, time.Second, time.Second,
		}},
		{Decorrelated, 0, ms(100, 100, 100, 100)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v r=%v", tt.j, tt.r), func(t *testing.T) {
			t.Parallel()
			b := newPtr(tt.j, base, max, func() float64 { return tt.r })
			for round := range 2 { // the second round checks Reset
				for i, want := range tt.want {
					if got := b.NextBackOff(); got != want {
						t.Fatalf("round %d: call %d = %v, want %v", round, i, got, want)
					}
				}
				b.Reset()
			}
		})
	}
}

func TestNewBounds(t *testing.T) {
	t.Parallel()
	const (
		base   = 300 * time.Millisecond
		max    = 10 * time.Second
		draws  = 20000
		perSeq = 12
	)
	for _, j := range []Kind{Full, Equal, Decorrelated, None} {
		t.Run(j.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(j)))
			b := newPtr(j, base, max, rng.Float64)
			var sawLow, sawHigh bool
			for seq := range draws / perSeq {
				b.Reset()
				prev := base
				for n := range perSeq {
					d := b.NextBackOff()
					v := CapExp(base, max, n)
					var lo, hi time.Duration // d must be in [lo, hi]
					switch j {
					case Full:
						lo, hi = 0, v-1
					case Equal:
						lo, hi = v/2, v-1
					case None:
						lo, hi = v, v
					case Decorrelated:
						lo, hi = base, min(max, 3*prev)
						prev = d
					}
					if d < lo || d > hi {
						t.Fatalf("seq %d call %d: %v not in [%v, %v]", seq, n, d, lo, hi)
					}
					sawLow = sawLow || d < lo+(hi-lo)/10
					sawHigh = sawHigh || d > hi-(hi-lo)/10
				}
			}
			if j != None && (!sawLow || !sawHigh) {
				t.Errorf("draws do not cover the range: low %v high %v", sawLow, sawHigh)
			}
		})
	}
}

func TestNewNoOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		base, max time.Duration
	}{
		{"ordinary", 300 * time.Millisecond, 10 * time.Second},
		{"max duration", time.Second, maxDuration},
		{"base near MaxInt64", maxDuration - 7, maxDuration},
		{"base above max", maxDuration, time.Hour},
		{"one nanosecond", 1, maxDuration},
	}
	for _, tt := range tests {
		for _, j := range []Kind{Full, Equal, Decorrelated, None} {
			t.Run(tt.name+"/"+j.String(), func(t *testing.T) {
				t.Parallel()
				for _, r := range []float64{0, 0.5, almostOne} {
					b := newPtr(j, tt.base, tt.max, func() float64 { return r })
					for n := range 1001 {
						d := b.NextBackOff()
						if d < 0 || d > tt.max || d == backoff.Stop {
							t.Fatalf("r=%v call %d: %v outside [0, %v]", r, n, d, tt.max)
						}
					}
				}
			})
		}
	}
}

func TestNewIndependentInstances(t *testing.T) {
	t.Parallel()
	half := func() float64 { return 0.5 }
	for _, j := range []Kind{Full, Equal, Decorrelated, None} {
		t.Run(j.String(), func(t *testing.T) {
			t.Parallel()
			a := newPtr(j, 100*time.Millisecond, time.Minute, half)
			b := newPtr(j, 100*time.Millisecond, time.Minute, half)
			first := a.NextBackOff()
			for range 5 {
				a.NextBackOff()
			}
			if got := b.NextBackOff(); got != first {
				t.Errorf("second instance's first wait = %v, want %v: state is shared", got, first)
			}
		})
	}
}

func TestNewDefaultRandom(t *testing.T) {
	t.Parallel()
	b := newPtr(Full, time.Second, time.Second, nil)
	seen := map[time.Duration]bool{}
	for range 100 {
		d := b.NextBackOff()
		if d < 0 || d >= time.Second {
			t.Fatalf("wait %v outside [0, 1s)", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct waits in 100 draws: not random", len(seen))
	}
}

func TestNewPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		j         Kind
		base, max time.Duration
	}{
		{"invalid jitter", Kind(9), time.Second, time.Second},
		{"negative jitter", Kind(-1), time.Second, time.Second},
		{"negative base", Full, -1, time.Second},
		{"negative max", Full, time.Second, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Error("New did not panic")
				}
			}()
			newPtr(tt.j, tt.base, tt.max, nil)
		})
	}
}

// ExampleNew prints the waits of full jitter with base 100ms and cap 1s,
// using a random source that always returns 0.5 (the middle of each range).
func ExampleNew() {
	b := newPtr(Full, 100*time.Millisecond, time.Second, func() float64 { return 0.5 })
	for range 6 {
		fmt.Println(b.NextBackOff())
	}
	// Output:
	// 50ms
	// 100ms
	// 200ms
	// 400ms
	// 500ms
	// 500ms
}

// ExampleKind compares the first four waits of each strategy with the same
// base (100ms), cap (1s) and a random source fixed at 0.5.
func ExampleKind() {
	for _, j := range []Kind{Full, Equal, Decorrelated, None} {
		b := newPtr(j, 100*time.Millisecond, time.Second, func() float64 { return 0.5 })
		fmt.Println(j, b.NextBackOff(), b.NextBackOff(), b.NextBackOff(), b.NextBackOff())
	}
	// Output:
	// Full 50ms 100ms 200ms 400ms
	// Equal 75ms 150ms 300ms 600ms
	// Decorrelated 200ms 350ms 575ms 912.5ms
	// None 100ms 200ms 400ms 800ms
}

// newPtr is New as a pointer, the form that has the methods.
func newPtr(j Kind, base, max time.Duration, rnd func() float64) *Backoff {
	b := New(j, base, max, rnd)
	return &b
}

// String names a Kind in the tests' output.
func (j Kind) String() string {
	return [...]string{"Full", "Equal", "Decorrelated", "None"}[j]
}
