package idem

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Jitter selects how the wait before a retry is randomised. The formulas are those
// of the AWS Architecture Blog's "Exponential Backoff and Jitter", where n counts
// the retries already waited for (0 before the first retry), base is the first
// wait and max caps every wait. U[a, b) is a uniform random duration in [a, b).
//
// The zero value is FullJitter.
type Jitter int

const (
	// FullJitter waits U[0, min(max, base*2^n)). It spreads competing clients
	// best and is the default.
	FullJitter Jitter = iota
	// EqualJitter waits v/2 + U[0, v/2) with v = min(max, base*2^n): never less
	// than half the exponential wait.
	EqualJitter
	// DecorrelatedJitter waits min(max, U[base, prev*3)), where prev is the
	// previous wait, starting at base.
	DecorrelatedJitter
	// NoJitter waits exactly min(max, base*2^n). Clients told the same thing
	// come back in lock-step; use it only where there is a single client.
	NoJitter
)

// String returns the constant's name, or "Jitter(n)" for a value that is not one.
func (j Jitter) String() string {
	switch j {
	case FullJitter:
		return "FullJitter"
	case EqualJitter:
		return "EqualJitter"
	case DecorrelatedJitter:
		return "DecorrelatedJitter"
	case NoJitter:
		return "NoJitter"
	}
	return fmt.Sprintf("Jitter(%d)", int(j))
}

// valid reports whether j is one of the four constants.
func (j Jitter) valid() bool {
	return j >= FullJitter && j <= NoJitter
}

// BackOff is a sequence of waits between retries. It has the method set of
// github.com/cenkalti/backoff's BackOff (v4 and v5), so a BackOff from
// NewBackOff can be used wherever one of those is expected.
type BackOff interface {
	// NextBackOff returns the wait before the next retry.
	NextBackOff() time.Duration
	// Reset starts the sequence over.
	Reset()
}

// NewBackOff returns a fresh BackOff for one logical operation: it holds
// per-operation state (the retry count, and the previous wait for
// DecorrelatedJitter), so never share one between operations.
//
// The n-th call of NextBackOff (n from 0) returns the wait before retry n+1.
// Reset starts over. NextBackOff never returns a stop value: how many attempts are
// made, and for how long, is the caller's decision. The exponential term
// saturates at max for every n, so it never overflows.
//
// rnd returns uniform numbers in [0, 1); nil means math/rand/v2's Float64. A
// value outside [0, 1) is clamped into it. NewBackOff panics if j is not one of
// the four constants or if base or max is negative.
func NewBackOff(j Jitter, base, max time.Duration, rnd func() float64) BackOff {
	if !j.valid() {
		panic(fmt.Sprintf("idem: NewBackOff: invalid Jitter %d", int(j)))
	}
	if base < 0 || max < 0 {
		panic(fmt.Sprintf("idem: NewBackOff: negative base (%v) or max (%v)", base, max))
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	return newJitterBackOff(j, base, max, rnd)
}

// newJitterBackOff is NewBackOff for checked arguments.
func newJitterBackOff(j Jitter, base, max time.Duration, rnd func() float64) *jitterBackOff {
	return &jitterBackOff{jitter: j, base: base, max: max, rnd: rnd, prev: base}
}

// The BackOff of the package that names the vocabulary.
var _ backoff.BackOff = (*jitterBackOff)(nil)

// jitterBackOff is the backoff.BackOff that NewBackOff returns.
type jitterBackOff struct {
	jitter    Jitter
	base, max time.Duration
	rnd       func() float64

	n    int           // retries already waited for
	prev time.Duration // the previous wait (DecorrelatedJitter), base after Reset
}

// NextBackOff returns the wait before the next retry.
func (b *jitterBackOff) NextBackOff() time.Duration {
	var d time.Duration
	switch b.jitter {
	case FullJitter:
		d = fullJitter(b.base, b.max, b.n, b.rnd())
	case EqualJitter:
		d = equalJitter(b.base, b.max, b.n, b.rnd())
	case DecorrelatedJitter:
		d = decorrelatedJitter(b.base, b.max, b.prev, b.rnd())
		b.prev = d
	case NoJitter:
		d = capExp(b.base, b.max, b.n)
	}
	if b.n < math.MaxInt {
		b.n++
	}
	return d
}

// Reset starts the sequence over, as for a new operation.
func (b *jitterBackOff) Reset() {
	b.n = 0
	b.prev = b.base
}

// capExp returns min(max, base*2^n) without overflowing, for any n. A negative n
// counts as 0; a non-positive base or max gives 0.
func capExp(base, max time.Duration, n int) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	if n < 0 {
		n = 0
	}
	if base >= max || n >= 63 || base > max>>uint(n) {
		return max
	}
	return base << uint(n)
}

// fullJitter returns U[0, min(max, base*2^n)) for the uniform number r in [0, 1).
func fullJitter(base, max time.Duration, n int, r float64) time.Duration {
	return scaleDuration(capExp(base, max, n), r)
}

// equalJitter returns v/2 + U[0, v/2) for v = min(max, base*2^n) and the uniform
// number r in [0, 1). The result is in [v/2, v) (v itself when v is 0).
func equalJitter(base, max time.Duration, n int, r float64) time.Duration {
	v := capExp(base, max, n)
	half := v / 2
	return half + scaleDuration(v-half, r)
}

// decorrelatedJitter returns min(max, U[base, prev*3)) for the uniform number r
// in [0, 1); prev*3 saturates instead of overflowing. When prev*3 <= base the
// range is empty and the result is min(max, base).
func decorrelatedJitter(base, max, prev time.Duration, r float64) time.Duration {
	if base < 0 {
		base = 0
	}
	if max < 0 {
		max = 0
	}
	if base >= max {
		return max
	}
	hi := time.Duration(math.MaxInt64)
	if prev < math.MaxInt64/3 {
		hi = prev * 3
	}
	d := base
	if hi > base {
		d += scaleDuration(hi-base, r)
	}
	return min(d, max)
}

// scaleDuration returns r*d truncated, in [0, d) for d > 0: r is clamped into
// [0, 1), and a product that float rounding would carry up to d becomes d-1.
// It returns 0 for d <= 0.
func scaleDuration(d time.Duration, r float64) time.Duration {
	if d <= 0 || !(r > 0) { // !(r > 0) also catches NaN
		return 0
	}
	f := float64(d)
	x := r * f
	if r >= 1 || x >= f {
		return d - 1
	}
	return time.Duration(x)
}
