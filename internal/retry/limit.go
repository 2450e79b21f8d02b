package retry

import "time"

// Limit is what the retries of every operation sharing it are paid from (an
// idem.Budget), and the table of hosts held back after a Retry-After. Its
// methods are safe for concurrent use.
type Limit interface {
	// Start records an operation's first attempt at now.
	Start(now time.Time)
	// Pay pays at now for one retry, a poll after an InProgress or a retry
	// after an attempt time-out, and returns what it took and whether it
	// could pay: a retry it cannot pay for is not made.
	Pay(now time.Time, poll, afterTimeout bool) (cost int, ok bool)
	// Refund hands back cost, paid at paidAt for a retry not made after all.
	Refund(paidAt time.Time, cost int)
	// Answered pays an operation that ended on an answer back, after
	// attempts attempts whose retries cost paid.
	Answered(now time.Time, attempts, paid int)
	// Queues reports whether an operation whose retry it cannot pay for
	// waits for that retry's turn and pays then, or skips the turn (true),
	// or ends at once with ErrBudgetExhausted (false).
	Queues() bool
	// Holds reports whether the limit ever holds a host back: when it does
	// not, an operation does not look before its first attempt.
	Holds() bool
	// Hold holds every operation on host back until the given time.
	Hold(host string, until time.Time)
	// HeldUntil returns the time until which host is held, or the zero time
	// if it is not held at now.
	HeldUntil(host string, now time.Time) time.Time
}

// noLimit pays for every retry and holds no host.
type noLimit struct{}

func (noLimit) Start(time.Time)                           {}
func (noLimit) Pay(time.Time, bool, bool) (int, bool)     { return 0, true }
func (noLimit) Refund(time.Time, int)                     {}
func (noLimit) Answered(time.Time, int, int)              {}
func (noLimit) Queues() bool                              { return false }
func (noLimit) Holds() bool                               { return false }
func (noLimit) Hold(string, time.Time)                    {}
func (noLimit) HeldUntil(string, time.Time) (t time.Time) { return t }
