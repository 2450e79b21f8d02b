package idem

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Default settings of a Budget.
const (
	defaultBudgetRatio        = 0.1
	defaultBudgetMinPerSecond = 10
	defaultBudgetTTL          = 10 * time.Second
	defaultBudgetMaxHeldHosts = 1024
)

// Limits on a Budget's settings; they keep its integer arithmetic exact and far
// from overflow.
const (
	maxBudgetRatio        = 100
	maxBudgetMinPerSecond = 1_000_000
	minBudgetTTL          = time.Second
	maxBudgetTTL          = time.Hour
)

const (
	// budgetScale is the number of units in one retry token. Deposits are
	// round(Ratio*budgetScale) units, so a ratio is exact to six decimals.
	budgetScale = 1_000_000
	// budgetBuckets is the number of time buckets the TTL window is cut into.
	budgetBuckets = 10
)

// Budget is what retries are paid from, so that a failing dependency receives
// a bounded multiple of its normal load instead of MaxAttempts times it. Every
// Transport has one: a budget of its own, unless WithRetryBudget gives it a
// shared one (or, with nil, none). The Transport's own is a bucket on the AWS
// SDK's numbers that answers and time refill, and a retry it cannot pay for
// waits for its turn (see WithRetryBudget); it is the Transport's alone and
// holds no host back. The rest of this comment is about a shared Budget.
//
// A shared Budget limits retries to a fraction of first attempts, so that a
// failing dependency receives at most about (1+Ratio) times its normal load
// instead of
// MaxAttempts times. It is the retry budget of Google's SRE book and of Finagle
// (RetryBudget), and the same idea as gRPC's retry throttling.
//
// Every logical operation deposits Ratio tokens when it makes its first attempt;
// every retry takes one whole token, and is refused when there is none. On top of
// the deposits, MinPerSecond×TTL tokens are always available, so that a service
// with little traffic can still retry. Deposits and retries count only for the
// TTL window: they are kept in ten time buckets of TTL/10 each and drop out
// together with their bucket, so a deposit counts for between 9/10 of TTL and
// TTL. Over any such window, retries ≤ Ratio×operations + MinPerSecond×TTL.
//
// A Budget also remembers hosts that answered 429 or 503 with a Retry-After, so
// that every operation sharing the Budget holds back from that host until the
// time it named, not only the operation that was told. At most MaxHeldHosts hosts
// are held at once (see budgetMaxHeldHosts).
//
// One Budget can be shared by any number of Transports and goroutines; give it to
// every Transport that calls the same dependency. A nil *Budget allows every
// retry and holds no host. The zero Budget is ready to use, as NewBudget(0.1,
// 10). A Budget must not be copied after first use.
type Budget struct {
	once sync.Once
	cfg  budgetConfig

	// Settings derived from cfg by init, read-only afterwards.
	deposit int64         // units deposited by one operation
	reserve int64         // units always available (MinPerSecond × TTL)
	width   time.Duration // width of one bucket

	mu          sync.Mutex
	started     bool
	epoch       time.Time // the first time seen; bucket k covers [epoch+k·width, epoch+(k+1)·width)
	head        int64     // index of the newest bucket
	buckets     [budgetBuckets]budgetBucket
	deposits    int64 // units deposited in the window (sum over buckets)
	withdrawals int64 // retries taken in the window (sum over buckets)
	stats       BudgetStats

	holds  hostHolds   // hosts held back after a 429 or 503 with Retry-After (hostholds.go)
	bucket *retryQuota // the Transport's own kind, a bucket whose retries queue (quota.go); nil for a shared one
}

// budgetBucket is what one TTL/10 slice of time holds.
type budgetBucket struct {
	deposits    int64 // units
	withdrawals int64 // retries
}

// BudgetStats counts what a Budget has done since it was created.
type BudgetStats struct {
	// Requests is the number of logical operations recorded (first attempts).
	Requests uint64
	// RetriesAllowed is the number of retries the budget allowed, including
	// those refunded afterwards.
	RetriesAllowed uint64
	// RetriesDenied is the number of retries refused because the budget was
	// exhausted.
	RetriesDenied uint64
	// Refunds is the number of allowed retries handed back unsent.
	Refunds uint64
	// HeldHosts is the number of hosts currently in the hold table (some of
	// which may have expired and not yet been pruned).
	HeldHosts int
}

// budgetConfig holds the settings of a Budget.
type budgetConfig struct {
	ratio        float64
	minPerSecond int
	ttl          time.Duration
	maxHeldHosts int
}

func defaultBudgetConfig() budgetConfig {
	return budgetConfig{
		ratio:        defaultBudgetRatio,
		minPerSecond: defaultBudgetMinPerSecond,
		ttl:          defaultBudgetTTL,
		maxHeldHosts: defaultBudgetMaxHeldHosts,
	}
}

// budgetOption configures a Budget made by newBudget.
type budgetOption func(*budgetConfig)

// budgetRatio sets how many retries each logical operation earns: with 0.1
// (the default), ten operations pay for one retry. It must be a number in
// [0, 100], exact to six decimals; 0 leaves only the MinPerSecond reserve.
// budgetRatio panics on any other value.
func budgetRatio(r float64) budgetOption {
	if !validBudgetRatio(r) {
		badArg(fmt.Sprintf("budgetRatio(%v)", r), fmt.Sprintf("0 <= ratio <= %d", maxBudgetRatio))
	}
	return func(c *budgetConfig) { c.ratio = r }
}

func validBudgetRatio(r float64) bool { return !math.IsNaN(r) && r >= 0 && r <= maxBudgetRatio }

func validBudgetMinPerSecond(n int) bool { return n >= 0 && n <= maxBudgetMinPerSecond }

// budgetMinPerSecond sets the retries per second that are allowed whatever
// the ratio, so that a service with little traffic can still retry; the reserve
// is n×TTL retries per TTL window. The default is 10; 0 is allowed. It panics
// unless 0 <= n <= 1,000,000.
func budgetMinPerSecond(n int) budgetOption {
	if !validBudgetMinPerSecond(n) {
		badArg(fmt.Sprintf("budgetMinPerSecond(%d)", n), fmt.Sprintf("0 <= minPerSecond <= %d", maxBudgetMinPerSecond))
	}
	return func(c *budgetConfig) { c.minPerSecond = n }
}

// budgetTTL sets the window over which deposits and retries count (default
// 10s): a burst of failures can spend what the last TTL of traffic earned, and no
// more. It panics unless 1s <= d <= 1h.
func budgetTTL(d time.Duration) budgetOption {
	if d < minBudgetTTL || d > maxBudgetTTL {
		badArg(fmt.Sprintf("budgetTTL(%v)", d), fmt.Sprintf("%v <= d <= %v", minBudgetTTL, maxBudgetTTL))
	}
	return func(c *budgetConfig) { c.ttl = d }
}

// budgetMaxHeldHosts sets how many hosts can be held back (after a 429 or 503
// with Retry-After) at once; the default is 1024 and 0 turns holding off. When
// the table is full, expired holds are dropped first; if it is still full, the
// hold that ends soonest gives way (the new one itself, if it ends sooner than
// all the others): a host that is not held is just retried under the ordinary
// rules, after its own Retry-After. It panics if n is negative.
func budgetMaxHeldHosts(n int) budgetOption {
	if n < 0 {
		badArg(fmt.Sprintf("budgetMaxHeldHosts(%d)", n), "n >= 0")
	}
	return func(c *budgetConfig) { c.maxHeldHosts = n }
}

// NewBudget returns a Budget that allows ratio retries per logical operation
// (0.1: ten operations pay for one retry) on top of minPerSecond retries per
// second whatever the traffic, counted over a 10s window, and holds at most
// 1024 hosts back at once (see Budget). Share it between the Transports that
// call the same dependency. It panics unless 0 <= ratio <= 100 (exact to six
// decimals) and 0 <= minPerSecond <= 1,000,000.
func NewBudget(ratio float64, minPerSecond int) *Budget {
	if !validBudgetRatio(ratio) {
		badArg(fmt.Sprintf("NewBudget(%v, %d)", ratio, minPerSecond), fmt.Sprintf("0 <= ratio <= %d", maxBudgetRatio))
	}
	if !validBudgetMinPerSecond(minPerSecond) {
		badArg(fmt.Sprintf("NewBudget(%v, %d)", ratio, minPerSecond), fmt.Sprintf("0 <= minPerSecond <= %d", maxBudgetMinPerSecond))
	}
	return newBudget(budgetRatio(ratio), budgetMinPerSecond(minPerSecond))
}

// newBudget returns a Budget with the defaults changed by opts.
func newBudget(opts ...budgetOption) *Budget {
	cfg := defaultBudgetConfig()
	for _, opt := range opts {
		if opt == nil {
			badArg("newBudget(nil budgetOption)", "a budgetOption")
		}
		opt(&cfg)
	}
	b := &Budget{cfg: cfg}
	b.once.Do(b.init)
	return b
}

// init derives the fixed settings from cfg, or from the defaults for a zero Budget.
func (b *Budget) init() {
	if b.cfg.ttl == 0 {
		b.cfg = defaultBudgetConfig()
	}
	b.deposit = int64(math.Round(b.cfg.ratio * budgetScale))
	if b.deposit == 0 && b.cfg.ratio > 0 {
		b.deposit = 1
	}
	// MinPerSecond × TTL tokens; ttl <= 1h and minPerSecond <= 1e6 keep this below 2^63.
	b.reserve = int64(b.cfg.minPerSecond) * budgetScale * int64(b.cfg.ttl/time.Millisecond) / 1000
	b.width = b.cfg.ttl / budgetBuckets
}

// recordRequest records one logical operation (its first attempt, not its
// retries), which deposits Ratio tokens.
func (b *Budget) recordRequest(now time.Time) {
	if b == nil {
		return
	}
	b.once.Do(b.init)
	b.mu.Lock()
	bk := b.advance(now)
	bk.deposits += b.deposit
	b.deposits += b.deposit
	b.stats.Requests++
	b.mu.Unlock()
}

// tryRetry takes one token for one retry and reports whether there was one; false
// means the budget is exhausted and the retry must not be sent. A retry that was
// allowed but is not sent after all must be handed back with refund.
func (b *Budget) tryRetry(now time.Time) bool {
	if b == nil {
		return true
	}
	b.once.Do(b.init)
	b.mu.Lock()
	defer b.mu.Unlock()
	bk := b.advance(now)
	if b.deposits+b.reserve-b.withdrawals*budgetScale < budgetScale {
		b.stats.RetriesDenied++
		return false
	}
	bk.withdrawals++
	b.withdrawals++
	b.stats.RetriesAllowed++
	return true
}

// refund hands back the token that the tryRetry call made at takenAt took, for a
// retry that was never sent. Pass the same time value that was passed to tryRetry:
// the token then goes back into the very bucket it came from and the budget is
// exactly as if the retry had never been asked for. A token whose bucket has
// already left the window is not handed back: it no longer counts anyway.
//
// refund never creates tokens: it cancels one retry still counted in the window
// (the newest at or before takenAt; failing that, the oldest after it) and does
// nothing when there is none.
func (b *Budget) refund(takenAt time.Time) {
	if b == nil {
		return
	}
	b.once.Do(b.init)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Refunds++
	if !b.started {
		return
	}
	tick := b.tick(takenAt)
	if tick > b.head {
		b.advance(takenAt)
		tick = b.head
	}
	oldest := b.head - budgetBuckets + 1
	if tick < oldest {
		return // the take has left the window
	}
	// The take is in bucket tick, or, if another caller had already moved the
	// window on when it was made, in a newer one.
	for k := tick; k >= oldest; k-- {
		if b.cancelWithdrawal(k) {
			return
		}
	}
	for k := tick + 1; k <= b.head; k++ {
		if b.cancelWithdrawal(k) {
			return
		}
	}
}

// cancelWithdrawal cancels one retry counted in bucket tick, if there is one.
// b.mu must be held.
func (b *Budget) cancelWithdrawal(tick int64) bool {
	bk := &b.buckets[bucketIndex(tick)]
	if bk.withdrawals == 0 {
		return false
	}
	bk.withdrawals--
	b.withdrawals--
	return true
}

// holdHost holds every operation on host back until the given time, after a 429
// or 503 with Retry-After.
func (b *Budget) holdHost(host string, until time.Time) {
	if b == nil {
		return
	}
	b.once.Do(b.init)
	b.holds.hold(host, until, b.cfg.maxHeldHosts)
}

// heldUntil returns the time until which host is held, or the zero time if it is
// not held at now.
func (b *Budget) heldUntil(host string, now time.Time) time.Time {
	if b == nil {
		return time.Time{}
	}
	return b.holds.until(host, now)
}

// Stats returns what b has done since it was created. It is cheap enough to call
// on every scrape of a metrics endpoint. A nil *Budget returns zero stats.
func (b *Budget) Stats() BudgetStats {
	if b == nil {
		return BudgetStats{}
	}
	b.mu.Lock()
	s := b.stats
	b.mu.Unlock()
	s.HeldHosts = int(b.holds.n.Load())
	return s
}

// balance returns the units available at now (a whole retry costs budgetScale).
func (b *Budget) balance(now time.Time) int64 {
	b.once.Do(b.init)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.deposits + b.reserve - b.withdrawals*budgetScale
}

// advance moves the window forward to now, dropping the buckets that leave it,
// and returns the bucket that now falls in. A now before the newest bucket (a
// caller that read the clock a little earlier than another) counts in the newest
// bucket. b.mu must be held.
func (b *Budget) advance(now time.Time) *budgetBucket {
	if !b.started {
		b.started = true
		b.epoch = now
		b.head = 0
		return &b.buckets[0]
	}
	tick := b.tick(now)
	if tick > b.head {
		for k := b.head + 1; k <= tick && k <= b.head+budgetBuckets; k++ {
			bk := &b.buckets[bucketIndex(k)]
			b.deposits -= bk.deposits
			b.withdrawals -= bk.withdrawals
			*bk = budgetBucket{}
		}
		b.head = tick
	}
	return &b.buckets[bucketIndex(b.head)]
}

// tick returns the index of the bucket that t falls in. b.mu must be held and
// b.started true.
func (b *Budget) tick(t time.Time) int64 {
	return int64(t.Sub(b.epoch) / b.width)
}

// bucketIndex maps a bucket's tick to its place in the ring.
func bucketIndex(tick int64) int {
	i := tick % budgetBuckets
	if i < 0 {
		i += budgetBuckets
	}
	return int(i)
}
