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
	err  error // set before done is closed: why the lease was lost or is in doubt, or nil
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
// granted. When the claim is lost, or may be (see renewUntilStopped), it calls
// lost with the reason (wrapping ErrLeaseLost).
func (s *Store) startLease(key string, claim []byte, req server.Request, granted time.Time, lost context.CancelCauseFunc) *lease {
	ctx, quit := context.WithCancel(context.Background())
	l := &lease{ctx: ctx, quit: quit, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.err = s.renewUntilStopped(ctx, key, claim, req, granted, lost)
	}()
	return l
}

// stop ends the renewals, waits for the renewing goroutine and reports whether
// the lease was lost, or in doubt, when it stopped (non-nil error wrapping
// ErrLeaseLost).
func (l *lease) stop() error {
	l.quit()
	<-l.done
	return l.err
}

// renewUntilStopped renews the claim every interval until ctx is cancelled or
// the renew script says another owner holds the key. It returns nil when the
// claim was still this owner's at its last word from Redis, else an error
// wrapping ErrLeaseLost: the key is someone else's, or no renewal has landed
// since the lease's local end (it may have been taken).
//
// The renew script's answer is authoritative: while the key still holds this
// claim, no other owner can have taken it, however late the renewal. So a
// failed renewal is retried, every quarter interval, for as long as the handler
// runs: a live owner that Redis could not hear for a while (Redis stalled,
// restarting, or cut off) gets its renewal in as soon as Redis answers again,
// which clears the suspect mark before the grace the claim script waits has
// passed, so the key is never taken under it. The local expiry (the last
// renewal sent + lockTTL, never later than Redis's own deadline) only decides
// when the handler is told: from then on another request may mark the claim
// suspect and take it one grace later, so lost is called (the handler's
// context is cancelled) at that moment, a whole grace before any takeover can
// happen, and the renewals go on.
func (s *Store) renewUntilStopped(ctx context.Context, key string, claim []byte, req server.Request, granted time.Time, lost context.CancelCauseFunc) error {
	lockTTL := req.LockTTL
	interval := s.renewEvery(lockTTL)
	retry := max(interval/4, time.Millisecond)
	expires := granted.Add(lockTTL) // in Redis the lease lasts at least until then
	var doubt error                 // non-nil once the local expiry passed without a renewal
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return doubt
		case <-timer.C:
		}
		sent := time.Now()
		deadline := sent.Add(min(s.cfg.opTimeout, interval))
		if sent.Before(expires) && expires.Before(deadline) {
			deadline = expires
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		n, err := call(rctx, s.direct, func(ctx context.Context) (int64, error) {
			return renewScript.Run(ctx, s.client, []string{key}, claim, millis(lockTTL), millis(claimKeyTTL(req))).Int64()
		})
		cancel()
		if ctx.Err() == nil {
			s.refreshOnError(err)
		}
		switch {
		case ctx.Err() != nil:
			return doubt // stopped while renewing: the caller's finish or release decides
		case err == nil && n == 1:
			expires, doubt = sent.Add(lockTTL), nil
			timer.Reset(max(time.Until(sent.Add(interval)), 0))
			continue
		case err == nil:
			err = fmt.Errorf("%w: the claim expired and another owner holds the key", ErrLeaseLost)
			lost(err)
			return err
		}
		if doubt == nil && !time.Now().Before(expires) {
			doubt = fmt.Errorf("%w: no renewal landed before the lease ended: %w", ErrLeaseLost, err)
			lost(doubt)
		}
		if left := time.Until(expires); left > 0 {
			timer.Reset(min(retry, left))
		} else {
			timer.Reset(retry)
		}
	}
}
