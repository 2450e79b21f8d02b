package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/server"
)

// lease renews one claim while its handler runs.
type lease struct {
	ctx  context.Context // cancelled by stop
	quit context.CancelFunc
	done chan struct{}
	err  error // set before done is closed: why the lease was lost, or nil
}

// renewEvery is how often a claim of lockTTL is renewed: the configured
// interval, but at least every half lockTTL; a third of lockTTL by default.
func (s *Store) renewEvery(lockTTL time.Duration) time.Duration {
	d := lockTTL / 3
	if s.cfg.renewInterval > 0 {
		d = min(s.cfg.renewInterval, lockTTL/2)
	}
	return max(d, time.Millisecond)
}

// startLease starts renewing the claim, which was granted no earlier than
// granted. When the claim is lost, it calls lost with the reason (wrapping
// ErrLeaseLost) and stops.
func (s *Store) startLease(key string, claim []byte, req server.Request, granted time.Time, lost context.CancelCauseFunc) *lease {
	ctx, quit := context.WithCancel(context.Background())
	l := &lease{ctx: ctx, quit: quit, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		if err := s.renewUntilStopped(ctx, key, claim, req, granted); err != nil {
			l.err = err
			lost(err)
		}
	}()
	return l
}

// stop ends the renewals, waits for the renewing goroutine and reports whether
// the lease was lost before that (non-nil error wrapping ErrLeaseLost).
func (l *lease) stop() error {
	l.quit()
	<-l.done
	return l.err
}

// renewUntilStopped renews the claim every interval until ctx is cancelled
// (nil) or the claim is lost (an error wrapping ErrLeaseLost).
//
// The renew script's answer is authoritative: while the key still holds this
// claim, no other owner can have taken it, however late the renewal. The local
// expiry time (granted or last renewal sent + lockTTL, never later than Redis's
// own) only matters when Redis does not answer: failed renewals are retried
// until then, and a renewal that fails at or past it loses the lease.
func (s *Store) renewUntilStopped(ctx context.Context, key string, claim []byte, req server.Request, granted time.Time) error {
	lockTTL := req.LockTTL
	interval := s.renewEvery(lockTTL)
	retry := max(interval/4, time.Millisecond)
	expires := granted.Add(lockTTL) // in Redis the lease lasts at least until then
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		sent := time.Now()
		late := !sent.Before(expires) // a starved goroutine or a slow Redis
		deadline := sent.Add(s.cfg.opTimeout)
		if late {
			deadline = sent.Add(min(s.cfg.opTimeout, interval))
		} else if expires.Before(deadline) {
			deadline = expires
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		n, err := renewScript.Run(rctx, s.client, []string{key}, claim, millis(lockTTL), millis(claimKeyTTL(req))).Int64()
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil // stopped while renewing: the caller's finish or release decides
		case err == nil && n == 1:
			expires = sent.Add(lockTTL)
			timer.Reset(max(time.Until(sent.Add(interval)), 0))
		case err == nil:
			return fmt.Errorf("%w: the claim expired or another owner holds the key", ErrLeaseLost)
		case late || !time.Now().Before(expires):
			return fmt.Errorf("%w: renewal failed until the lease expired: %w", ErrLeaseLost, err)
		default:
			timer.Reset(max(min(retry, time.Until(expires)), 0))
		}
	}
}
