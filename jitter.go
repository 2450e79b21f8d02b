package idem

import "github.com/idemkit/idem/internal/jitter"

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

// valid reports whether j is one of the four constants.
func (j Jitter) valid() bool {
	return j >= FullJitter && j <= NoJitter
}

// kind is j as internal/jitter names it.
func (j Jitter) kind() jitter.Kind { return jitter.Kind(j) }
