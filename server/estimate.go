package server

import (
	"slices"
	"sync/atomic"
	"time"
)

// durationSamples is how many recent handler durations a middleware keeps
// for its Retry-After estimate.
const durationSamples = 64

// durations holds the last durationSamples handler durations of one
// middleware, lock-free: each run writes one slot of a ring. A reader may see
// a slot being rewritten; it then reads either value, which is as good.
type durations struct {
	next atomic.Uint64
	ring [durationSamples]atomic.Int64
}

// add records the duration of one run of the handler.
func (d *durations) add(x time.Duration) {
	i := d.next.Add(1) - 1
	d.ring[i%durationSamples].Store(int64(max(x, 0)))
}

// p90 returns the 90th percentile of the recorded durations (nearest rank),
// and false when none was recorded yet.
func (d *durations) p90() (time.Duration, bool) {
	n := min(d.next.Load(), durationSamples)
	if n == 0 {
		return 0, false
	}
	xs := make([]int64, n)
	for i := range xs {
		xs[i] = d.ring[i].Load()
	}
	slices.Sort(xs)
	rank := (9*int(n) + 9) / 10 // ceil(0.9 n), 1-based
	return time.Duration(xs[rank-1]), true
}

// minRetryAfter is the shortest Retry-After the middleware sends.
const minRetryAfter = time.Second

// inProgressRetryAfter is the Retry-After of a 409: when the first request's
// answer is likely to exist. It is the 90th percentile of this middleware's
// recent handler durations less the time this duplicate already waited (the
// duplicate does not know how long the first request has run), bounded above
// by the owner's remaining lease where the store knows it (lease > 0), and at
// least one second. With no handler run yet it is one second: come back soon.
// The header carries whole seconds: the estimate is rounded to the nearest one,
// not up, so that a 1.2 s estimate asks for 1 s (a client polling at 2 s would
// learn the answer up to a second after it exists), and a lease is never
// exceeded by the rounding.
func inProgressRetryAfter(p90 time.Duration, known bool, waited, lease time.Duration) time.Duration {
	est := minRetryAfter
	if known && p90-waited > est {
		est = p90 - waited
	}
	est = est.Round(time.Second)
	if lease > 0 && lease < est {
		est = lease.Truncate(time.Second)
	}
	return max(est, minRetryAfter)
}
