package idem

import (
	"sync"
	"sync/atomic"
	"time"
)

// The numbers of a Transport's own budget. The bucket is that of the AWS SDK for Go
// v2's standard retryer (its retry quota, on by default): 500 units, 5 for a
// retry, 10 for a retry after an attempt time-out, 1 back for each operation
// answered at its first attempt, and the cost of the retries back when a
// retried operation is answered. Unlike AWS's, it also refills with time, one
// unit every 200ms (one retry's cost a second), so that a Transport whose
// every operation is failing still probes the dependency, and notices that it
// is back, instead of waiting for answers that only retries would bring.
const (
	quotaCapacity       = 500
	quotaRetryCost      = 5
	quotaTimeoutCost    = 10
	quotaNoRetryCredit  = 1
	quotaRefillEvery    = 200 * time.Millisecond
	quotaRetriesAtFirst = quotaCapacity / quotaRetryCost // 100 retries from a full bucket
)

// retryQuota is the bucket of a Transport's own Budget: retries are
// paid for from a bucket that answers fill, and time slowly. It lets a client
// ride out a short outage (a full bucket pays for 100 retries, then one a
// second), and through a long one bounds the retries the Transport sends,
// however many operations it carries, to one a second once the bucket is
// empty. An operation whose retry it cannot pay for waits for that retry's
// turn and pays then, or skips the turn, instead of failing (see
// retry.Op.awaitTurn). The zero value is not ready: use newRetryQuota.
type retryQuota struct {
	mu     sync.Mutex
	tokens int
	at     time.Time // the time tokens was brought up to date at
	// full is tokens == quotaCapacity, written under mu and read without
	// it: every operation answered at its first attempt gives a unit back,
	// and a full bucket, the usual state, takes it without the lock.
	full atomic.Bool
}

func newRetryQuota() *retryQuota {
	q := &retryQuota{tokens: quotaCapacity}
	q.full.Store(true)
	return q
}

// setTokens sets the units in the bucket. q.mu must be held.
func (q *retryQuota) setTokens(n int) {
	q.tokens = n
	q.full.Store(n >= quotaCapacity)
}

// refill adds the units time has earned since q.at, up to the capacity. A
// full bucket earns nothing; a time before q.at (another operation's, a
// moment later) changes nothing. q.mu must be held.
func (q *retryQuota) refill(now time.Time) {
	if q.tokens >= quotaCapacity || q.at.IsZero() {
		q.at = now
		return
	}
	if n := int64(now.Sub(q.at) / quotaRefillEvery); n > 0 {
		q.setTokens(int(min(int64(q.tokens)+n, quotaCapacity)))
		q.at = q.at.Add(time.Duration(n) * quotaRefillEvery)
		if q.tokens == quotaCapacity {
			q.at = now
		}
	}
}

// take pays at now for one retry (one after an attempt time-out costs more)
// and reports the cost taken, or 0 when the bucket cannot pay: the retry must
// not be made.
func (q *retryQuota) take(now time.Time, afterTimeout bool) int {
	cost := quotaRetryCost
	if afterTimeout {
		cost = quotaTimeoutCost
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refill(now)
	if q.tokens < cost {
		return 0
	}
	q.setTokens(q.tokens - cost)
	return cost
}

// give puts n units back at now, up to the capacity: the cost of a retry not
// made after all, or of the retries of an operation that was answered, or the
// credit of an operation answered at its first attempt.
//
// A full bucket has nothing to add, and what time it was brought up to date
// at does not count while it is full (refill), so it is left as it is.
func (q *retryQuota) give(now time.Time, n int) {
	if n <= 0 || q.full.Load() {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refill(now)
	q.setTokens(min(q.tokens+n, quotaCapacity))
}
