package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Reaper defaults.
const (
	DefaultReapInterval = time.Minute
	DefaultReapBatch    = 1000
)

// DeleteExpired deletes expired records in batches of at most batch rows, one
// short statement per batch, until a batch finds fewer than batch rows, and
// returns how many it deleted. Rows locked at that moment (a record being
// written over an expired one) are skipped. batch must be positive.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("%w: DeleteExpired batch %d", errBadRequest, batch)
	}
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.sql.deleteExpired, batch)
		if err != nil {
			return total, fmt.Errorf("pgstore: delete expired: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// Reaper configures StartReaper. The zero value deletes in batches of
// DefaultReapBatch every DefaultReapInterval and reports nothing.
type Reaper struct {
	// Interval between runs; zero means DefaultReapInterval.
	Interval time.Duration
	// Batch is the most rows one DELETE removes; zero means DefaultReapBatch.
	Batch int
	// Report, if set, is called after every run with what DeleteExpired returned.
	Report func(deleted int64, err error)
}

// StartReaper runs DeleteExpired at once and then every r.Interval in a goroutine,
// until ctx is done or stop is called. stop waits for a run in progress to end
// and may be called more than once. Negative settings panic.
func (s *Store) StartReaper(ctx context.Context, r Reaper) (stop func()) {
	if r.Interval < 0 || r.Batch < 0 {
		panic(fmt.Sprintf("pgstore: StartReaper(Reaper{Interval: %v, Batch: %d}): want Interval and Batch >= 0", r.Interval, r.Batch))
	}
	if r.Interval == 0 {
		r.Interval = DefaultReapInterval
	}
	if r.Batch == 0 {
		r.Batch = DefaultReapBatch
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.Interval)
		defer t.Stop()
		for {
			n, err := s.DeleteExpired(ctx, r.Batch)
			if r.Report != nil && ctx.Err() == nil {
				r.Report(n, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(cancel)
		<-done
	}
}
