package server

import (
	"context"
	"time"

	"github.com/idemkit/idem/internal/serverlink"
)

// The adapters of other modules (idem/grpc) protect their requests with the
// middleware's own parts, through internal/serverlink.
func init() {
	serverlink.Reserve = func(l any, n int64) bool { return linkLimits(l).reserve(n) }
	serverlink.Unreserve = func(l any, n int64) { linkLimits(l).unreserve(n) }
	serverlink.RequestTimeout = func(l any) time.Duration { return linkLimits(l).timeout }
	serverlink.Protect = func(ctx context.Context, l any) (context.Context, func() bool) {
		c := &limitsContext{limits: linkLimits(l)}
		c.effectContext = effectContext{Context: ctx, flag: new(effectFlag)}
		return c, c.flag.happened
	}
	serverlink.InProgressRetryAfter = inProgressRetryAfter
	serverlink.NewDurations = func() (func(time.Duration), func() (time.Duration, bool)) {
		d := new(durations)
		return d.add, d.p90
	}
	serverlink.Recorded = recorded
}

// linkLimits is the *Limits an adapter passed, nil for the process's default.
func linkLimits(l any) *Limits {
	if l, _ := l.(*Limits); l != nil {
		return l
	}
	return defaultLimits
}
