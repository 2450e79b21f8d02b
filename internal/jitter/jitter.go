// Package jitter is the arithmetic of the waits between retries, after the
// AWS Architecture Blog's "Exponential Backoff and Jitter": n counts the
// retries already waited for (0 before the first retry), base is the first
// wait and max caps every wait; U[a, b) is a uniform random duration in
// [a, b). The client (package idem) draws its waits with it; bench compares
// the strategies with it.
package jitter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Kind selects a strategy; idem.Jitter names the same four in the same order.
type Kind int

const (
	Full         Kind = iota // U[0, min(max, base*2^n))
	Equal                    // v/2 + U[0, v/2) with v = min(max, base*2^n)
	Decorrelated             // min(max, U[base, prev*3))
	None                     // min(max, base*2^n)
)

// New returns a fresh Backoff for one logical operation: it holds
// per-operation state (the retry count, and the previous wait for
// DecorrelatedJitter), so never share one between operations.
//
// The n-th call of NextBackOff (n from 0) returns the wait before retry n+1.
// Reset starts over. NextBackOff never returns a stop value: how many attempts are
// made, and for how long, is the caller's decision. The exponential term
// saturates at max for every n, so it never overflows.
//
// rnd returns uniform numbers in [0, 1); nil means math/rand/v2's Float64. A
// value outside [0, 1) is clamped into it. New panics if j is not one of
// the four constants or if base or max is negative.
func New(j Kind, base, max time.Duration, rnd func() float64) Backoff {
	if j < Full || j > None {
		panic(fmt.Sprintf("idem: jitter.New: invalid Kind %d", int(j)))
	}
	if base < 0 || max < 0 {
		panic(fmt.Sprintf("idem: jitter.New: negative base (%v) or max (%v)", base, max))
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	return Backoff{jitter: j, base: base, max: max, rnd: rnd, prev: base}
}

// The BackOff of the package that names the vocabulary.
var _ backoff.BackOff = (*Backoff)(nil)

// Backoff is a github.com/cenkalti/backoff BackOff (v4 and v5) that New
// returns. Its zero value is not ready: use New.
type Backoff struct {
	jitter    Kind
	base, max time.Duration
	rnd       func() float64

	n    int           // retries already waited for
	prev time.Duration // the previous wait (DecorrelatedJitter), base after Reset
}

// NextBackOff returns the wait before the next retry.
func (b *Backoff) NextBackOff() time.Duration {
	var d time.Duration
	switch b.jitter {
	case Full:
		d = FullWait(b.base, b.max, b.n, b.rnd())
	case Equal:
		d = EqualWait(b.base, b.max, b.n, b.rnd())
	case Decorrelated:
		d = DecorrelatedWait(b.base, b.max, b.prev, b.rnd())
		b.prev = d
	case None:
		d = CapExp(b.base, b.max, b.n)
	}
	if b.n < math.MaxInt {
		b.n++
	}
	return d
}

// Reset starts the sequence over, as for a new operation.
func (b *Backoff) Reset() {
	b.n = 0
	b.prev = b.base
}

// CapExp returns min(max, base*2^n) without overflowing, for any n. A negative n
// counts as 0; a non-positive base or max gives 0.
func CapExp(base, max time.Duration, n int) time.Duration {
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

// FullWait returns U[0, min(max, base*2^n)) for the uniform number r in [0, 1).
func FullWait(base, max time.Duration, n int, r float64) time.Duration {
	return Scale(CapExp(base, max, n), r)
}

// EqualWait returns v/2 + U[0, v/2) for v = min(max, base*2^n) and the uniform
// number r in [0, 1). The result is in [v/2, v) (v itself when v is 0).
func EqualWait(base, max time.Duration, n int, r float64) time.Duration {
	v := CapExp(base, max, n)
	half := v / 2
	return half + Scale(v-half, r)
}

// DecorrelatedWait returns min(max, U[base, prev*3)) for the uniform number r
// in [0, 1); prev*3 saturates instead of overflowing. When prev*3 <= base the
// range is empty and the result is min(max, base).
func DecorrelatedWait(base, max, prev time.Duration, r float64) time.Duration {
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
		d += Scale(hi-base, r)
	}
	return min(d, max)
}

// Scale returns r*d truncated, in [0, d) for d > 0: r is clamped into
// [0, 1), and a product that float rounding would carry up to d becomes d-1.
// It returns 0 for d <= 0.
func Scale(d time.Duration, r float64) time.Duration {
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
