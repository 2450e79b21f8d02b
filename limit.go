package idem

import (
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// budgetLimit is a Budget as the engine's retry.Limit: the one thing a
// Transport's retries are paid from. A Budget is of one of two kinds:
//
//   - a shared Budget (NewBudget, the zero Budget): retries are a fraction
//     of first attempts over a window; a retry it cannot pay for is refused,
//     and the operation ends with ErrBudgetExhausted; it holds hosts back
//     after a 429 or 503 with Retry-After (budget.go, hostholds.go);
//   - the Transport's own, when it is given none (newTransportBudget): a
//     bucket that answers and time refill; a retry it cannot pay for waits
//     for its turn, or skips it (quota.go). It holds no host back: only a
//     Budget shared by the operations on a host knows what the host said to
//     another.
type budgetLimit struct{ b *Budget }

var _ retry.Limit = budgetLimit{}

// newTransportBudget returns a Transport's own budget, of the bucket kind.
func newTransportBudget() *Budget {
	b := &Budget{cfg: defaultBudgetConfig(), bucket: newRetryQuota()}
	b.cfg.maxHeldHosts = 0
	b.once.Do(b.init)
	return b
}

func (l budgetLimit) Start(now time.Time) {
	if l.b.bucket == nil {
		l.b.recordRequest(now)
	}
}

// Pay pays for a retry. The bucket does not charge a poll after a keyed 409:
// it is no retry of a failure (the server said the answer is coming), and
// polls are bounded on their own (the engine's MaxPolls, the cap).
func (l budgetLimit) Pay(now time.Time, poll, afterTimeout bool) (int, bool) {
	q := l.b.bucket
	switch {
	case q == nil:
		return 1, l.b.tryRetry(now)
	case poll:
		return 0, true
	}
	cost := q.take(now, afterTimeout)
	return cost, cost > 0
}

func (l budgetLimit) Refund(paidAt time.Time, cost int) {
	if q := l.b.bucket; q != nil {
		q.give(paidAt, cost)
		return
	}
	l.b.refund(paidAt)
}

// Answered pays the bucket back for an operation that ended on an answer:
// its retries' cost, or the credit of an answer at the first attempt.
func (l budgetLimit) Answered(now time.Time, attempts, paid int) {
	q := l.b.bucket
	switch {
	case q == nil:
	case attempts <= 1:
		q.give(now, quotaNoRetryCredit)
	default:
		q.give(now, paid)
	}
}

func (l budgetLimit) Queues() bool { return l.b.bucket != nil }

func (l budgetLimit) Holds() bool {
	l.b.once.Do(l.b.init)
	return l.b.cfg.maxHeldHosts > 0
}

func (l budgetLimit) Hold(host string, until time.Time) { l.b.holdHost(host, until) }

func (l budgetLimit) HeldUntil(host string, now time.Time) time.Time {
	return l.b.heldUntil(host, now)
}
