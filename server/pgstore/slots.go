package pgstore

import (
	"context"
	"fmt"
	"time"
)

// handlerSlots counts the handlers a Store runs at once, each holding a pooled
// connection, so that WithReservedConns connections stay free for replays,
// duplicates and the application's other queries. A nil handlerSlots is no
// limit.
type handlerSlots chan struct{}

// newHandlerSlots allows maxConns - reserved handlers; none reserved is no limit.
func newHandlerSlots(maxConns, reserved int) handlerSlots {
	if reserved == 0 {
		return nil
	}
	return make(handlerSlots, maxConns-reserved)
}

// try takes a slot if one is free.
func (h handlerSlots) try() bool {
	if h == nil {
		return true
	}
	select {
	case h <- struct{}{}:
		return true
	default:
		return false
	}
}

// wait takes a slot, waiting at most d; past d the error wraps ErrPoolExhausted.
func (h handlerSlots) wait(ctx context.Context, d time.Duration) error {
	if h == nil {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case h <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return fmt.Errorf("%w: all %d handler slots busy (waited %v)", ErrPoolExhausted, cap(h), d)
	}
}

// release frees a slot taken by try or wait.
func (h handlerSlots) release() {
	if h != nil {
		<-h
	}
}

// lookSlots bounds the looks again of waiting duplicates (Request.Wait) that
// run at once, each on a pooled connection for two round trips, so that any
// number of duplicates of a slow key, from one tenant or many, take at most
// that share of the pool: between looks a waiter holds no connection.
type lookSlots chan struct{}

// looksFor is how many looks may run at once: the reserve (WithReservedConns),
// which handler slots leave free, or an eighth of the pool, at least 1, when
// nothing is reserved.
func looksFor(maxConns, reserved int) int {
	if reserved > 0 {
		return reserved
	}
	return max(1, maxConns/8)
}

// wait takes a place for one look, waiting until one is free, ctx is done or
// until has passed; it reports whether it took one.
func (l lookSlots) wait(ctx context.Context, until time.Time) bool {
	select {
	case l <- struct{}{}:
		return true
	default:
	}
	d := time.Until(until)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case l <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// release frees a place taken by wait.
func (l lookSlots) release() { <-l }
