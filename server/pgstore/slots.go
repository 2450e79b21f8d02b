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
