package idem

import "sync"

// The default retry quota's numbers: those of the AWS SDK for Go v2's
// standard retryer (its retry quota, on by default): a bucket of 500 units, 5
// for a retry, 10 for a retry after an attempt time-out, 1 back for each
// operation answered at its first attempt, and the cost of the retries back
// when a retried operation is answered.
const (
	quotaCapacity       = 500
	quotaRetryCost      = 5
	quotaTimeoutCost    = 10
	quotaNoRetryCredit  = 1
	quotaRetriesAtFirst = quotaCapacity / quotaRetryCost // 100 retries from a full bucket
)

// retryQuota is the retry limit of a Transport given no Budget: retries are
// paid for from a bucket that only answers fill, never time. It lets a client
// ride out a short outage (a full bucket pays for 100 retries) and, through a
// long one, makes it send about one attempt per operation once the bucket is
// empty, instead of WithMaxAttempts. The zero value is not ready: use
// newRetryQuota.
type retryQuota struct {
	mu     sync.Mutex
	tokens int
}

func newRetryQuota() *retryQuota {
	return &retryQuota{tokens: quotaCapacity}
}

// take pays for one retry (one after an attempt time-out costs more) and
// reports the cost taken, or 0 when the bucket cannot pay: the retry must not
// be made.
func (q *retryQuota) take(afterTimeout bool) int {
	cost := quotaRetryCost
	if afterTimeout {
		cost = quotaTimeoutCost
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tokens < cost {
		return 0
	}
	q.tokens -= cost
	return cost
}

// give puts n units back, up to the capacity: the cost of a retry not made
// after all, or of the retries of an operation that was answered, or the
// credit of an operation answered at its first attempt.
func (q *retryQuota) give(n int) {
	if n <= 0 {
		return
	}
	q.mu.Lock()
	q.tokens = min(q.tokens+n, quotaCapacity)
	q.mu.Unlock()
}
