package idem

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// budgetT0 is the frozen start of the budget tests' clock.
var budgetT0 = time.Date(2025, time.January, 2, 3, 4, 5, 0, time.UTC)

// runOps simulates ops logical operations against an always-failing server, all
// at now: each records its first attempt and then asks for up to wantRetries
// retries, stopping at the first refusal. It returns the retries allowed.
func runOps(b *Budget, now time.Time, ops, wantRetries int) int {
	retries := 0
	for range ops {
		b.recordRequest(now)
		for range wantRetries {
			if !b.tryRetry(now) {
				break
			}
			retries++
		}
	}
	return retries
}

func TestBudgetNil(t *testing.T) {
	t.Parallel()
	var b *Budget
	b.recordRequest(budgetT0)
	for range 100 {
		if !b.tryRetry(budgetT0) {
			t.Fatal("nil Budget refused a retry")
		}
	}
	b.refund(budgetT0)
	b.holdHost("example.com", budgetT0.Add(time.Hour))
	if got := b.heldUntil("example.com", budgetT0); !got.IsZero() {
		t.Errorf("nil Budget holds a host until %v", got)
	}
	if got := b.Stats(); got != (BudgetStats{}) {
		t.Errorf("nil Budget Stats() = %+v, want zero", got)
	}
}

// TestBudgetBoundsRetries is the budget's reason to exist: 1,000 operations that
// each want 4 retries against an always-failing server make about 1,100 attempts,
// not 5,000.
func TestBudgetBoundsRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		spread time.Duration // operations are spread evenly over this time
	}{
		{"one instant", 0},
		{"within one window", 9 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBudget(budgetRatio(0.1), budgetMinPerSecond(0))
			const ops = 1000
			retries := 0
			for i := range ops {
				now := budgetT0.Add(tt.spread * time.Duration(i) / ops)
				retries += runOps(b, now, 1, 4)
			}
			if retries != 100 {
				t.Errorf("retries = %d, want exactly 100 (10%% of %d)", retries, ops)
			}
			if attempts := ops + retries; attempts != 1100 {
				t.Errorf("attempts = %d, want 1100", attempts)
			}
			s := b.Stats()
			// Every operation asks until it is refused once.
			want := BudgetStats{Requests: ops, RetriesAllowed: 100, RetriesDenied: ops}
			if s != want {
				t.Errorf("Stats() = %+v, want %+v", s, want)
			}
		})
	}
}

func TestBudgetBoundsRetriesConcurrent(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetRatio(0.1), budgetMinPerSecond(0))
	const (
		workers      = 32
		opsPerWorker = 1000 / workers
		ops          = workers * opsPerWorker
	)
	start := make(chan struct{})
	results := make(chan int, workers)
	for w := range workers {
		go func() {
			<-start
			// Each worker reads a slightly different clock, all within one window.
			now := budgetT0.Add(time.Duration(w) * time.Millisecond)
			results <- runOps(b, now, opsPerWorker, 4)
		}()
	}
	close(start)
	retries := 0
	for range workers {
		retries += <-results
	}
	if max := ops / 10; retries > max || retries == 0 {
		t.Errorf("retries = %d, want 1..%d", retries, max)
	}
	s := b.Stats()
	if s.Requests != ops || s.RetriesAllowed != uint64(retries) {
		t.Errorf("Stats() = %+v, want %d requests and %d retries", s, ops, retries)
	}
	if got := b.balance(budgetT0.Add(time.Second)); got < 0 {
		t.Errorf("balance = %d units, negative: tokens were overdrawn", got)
	}
}

// TestBudgetSteadyState runs a minute of simulated traffic (100 operations a
// second, each wanting 4 retries, against a server that always fails) and checks
// the bound of every window, with the default reserve on.
func TestBudgetSteadyState(t *testing.T) {
	t.Parallel()
	b := newBudget() // ratio 0.1, 10/s, TTL 10s
	const (
		seconds   = 60
		perSecond = 100
	)
	perTick := make([]int, seconds*10) // retries allowed in each 100ms
	for i := range seconds * perSecond {
		now := budgetT0.Add(time.Duration(i) * time.Second / perSecond)
		perTick[i*10/perSecond] += runOps(b, now, 1, 4)
	}
	total := 0
	for _, n := range perTick {
		total += n
	}
	// Each window of TTL (ten whole buckets) may spend what it earned plus the
	// reserve.
	for start := 0; start+100 <= len(perTick); start += 10 {
		inWindow := 0
		for _, n := range perTick[start : start+100] {
			inWindow += n
		}
		if max := perSecond*10/10 + 10*10; inWindow > max {
			t.Fatalf("window starting at %v: %d retries, want at most %d", time.Duration(start)*100*time.Millisecond, inWindow, max)
		}
	}
	ops := seconds * perSecond
	if attempts := ops + total; attempts > ops*13/10 {
		t.Errorf("attempts = %d for %d operations: more than 1.3x the load", attempts, ops)
	}
	if total < ops/10 {
		t.Errorf("retries = %d, want at least Ratio*ops = %d", total, ops/10)
	}
}

func TestBudgetDepositsExpire(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetRatio(0.1), budgetMinPerSecond(0), budgetTTL(10*time.Second))
	for range 100 {
		b.recordRequest(budgetT0)
	}
	tests := []struct {
		after time.Duration
		want  int64 // units
	}{
		{0, 10 * budgetScale},
		{time.Second, 10 * budgetScale},
		{9*time.Second + 999*time.Millisecond, 10 * budgetScale}, // bucket 9 of 0..9
		{10 * time.Second, 0},                                    // bucket 0 has left the window
		{time.Hour, 0},
	}
	for _, tt := range tests { // in order: the clock only moves forward
		if got := b.balance(budgetT0.Add(tt.after)); got != tt.want {
			t.Errorf("balance after %v = %d, want %d", tt.after, got, tt.want)
		}
	}
	if b.tryRetry(budgetT0.Add(time.Hour)) {
		t.Error("a retry was allowed on deposits older than the TTL")
	}
}

func TestBudgetMinPerSecondRefills(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetRatio(0), budgetMinPerSecond(2), budgetTTL(10*time.Second))
	take := func(now time.Time) int {
		n := 0
		for b.tryRetry(now) {
			n++
			if n > 1000 {
				t.Fatal("the reserve never runs out")
			}
		}
		return n
	}
	steps := []struct {
		after time.Duration
		want  int
	}{
		{0, 20}, // 2/s × 10s, all at once
		{5 * time.Second, 0},
		{9*time.Second + 999*time.Millisecond, 0},
		{10 * time.Second, 20}, // the first retries have left the window
		{15 * time.Second, 0},
		{25 * time.Second, 20},
	}
	for _, s := range steps {
		if got := take(budgetT0.Add(s.after)); got != s.want {
			t.Errorf("retries allowed at +%v = %d, want %d", s.after, got, s.want)
		}
	}
}

func TestBudgetRatioExact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ratio float64
		ops   int
		want  int
	}{
		{0.1, 1000, 100},
		{0.25, 1000, 250},
		{1, 10, 10},
		{1.5, 10, 15},
		{0.333333, 3, 0}, // 3 × 0.333333 < 1: never rounds up into a token
		{0.000001, 1_000_000, 1},
		{0, 1000, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.ratio), func(t *testing.T) {
			t.Parallel()
			b := newBudget(budgetRatio(tt.ratio), budgetMinPerSecond(0))
			for range tt.ops {
				b.recordRequest(budgetT0)
			}
			// Bounded: a budget that never refuses fails here, not at the
			// test binary's time-out.
			got := 0
			for got <= tt.want && b.tryRetry(budgetT0) {
				got++
			}
			if got != tt.want {
				t.Errorf("ratio %v, %d operations: %d retries, want %d", tt.ratio, tt.ops, got, tt.want)
			}
		})
	}
}

func TestBudgetRefundExact(t *testing.T) {
	t.Parallel()
	b := newBudget()
	for range 37 {
		b.recordRequest(budgetT0)
	}
	before := b.balance(budgetT0)
	pairs := 1_000_000
	if testing.Short() {
		pairs = 10_000
	}
	for i := range pairs {
		if !b.tryRetry(budgetT0) {
			t.Fatalf("iteration %d: retry refused: refunds leak", i)
		}
		b.refund(budgetT0)
	}
	if after := b.balance(budgetT0); after != before {
		t.Errorf("balance after %d take/refund pairs = %d, want %d", pairs, after, before)
	}
	if s := b.Stats(); s.RetriesAllowed != uint64(pairs) || s.Refunds != uint64(pairs) || s.RetriesDenied != 0 {
		t.Errorf("Stats() = %+v", s)
	}
}

// TestBudgetRefundAcrossTime compares a budget whose retries are taken and
// refunded later with a twin that never asked: they must agree at every moment.
func TestBudgetRefundAcrossTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		takeAt   time.Duration
		refundAt time.Duration // when refund is called, with the take's time
	}{
		{"same bucket", 0, 500 * time.Millisecond},
		{"next bucket", 0, 1500 * time.Millisecond},
		{"late in the window", 2 * time.Second, 11 * time.Second},
		{"after the take left the window", 0, 12 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := []budgetOption{budgetRatio(0.5), budgetMinPerSecond(1)}
			b, twin := newBudget(opts...), newBudget(opts...)
			var taken []time.Time
			// Traffic every 250ms for 30s; at takeAt, three retries are taken
			// and at refundAt they are refunded.
			for ms := time.Duration(0); ms <= 30*time.Second; ms += 250 * time.Millisecond {
				now := budgetT0.Add(ms)
				b.recordRequest(now)
				twin.recordRequest(now)
				if ms == tt.takeAt {
					for range 3 {
						if !b.tryRetry(now) {
							t.Fatal("retry refused")
						}
						taken = append(taken, now)
					}
				}
				if ms == tt.refundAt {
					for _, at := range taken {
						b.refund(at)
					}
				}
				if tt.takeAt <= ms && ms < tt.refundAt {
					continue // the retries are out: b is lower than twin
				}
				if got, want := b.balance(now), twin.balance(now); got != want {
					t.Fatalf("at +%v: balance %d, twin that never retried %d", ms, got, want)
				}
			}
		})
	}
}

func TestBudgetRefundNeverCreatesTokens(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetRatio(0.1), budgetMinPerSecond(0))
	b.refund(budgetT0) // before anything happened
	for range 10 {
		b.recordRequest(budgetT0)
	}
	before := b.balance(budgetT0)
	for range 5 {
		b.refund(budgetT0) // no retry was taken
	}
	if got := b.balance(budgetT0); got != before {
		t.Errorf("balance after refunds of nothing = %d, want %d", got, before)
	}
	// More refunds than takes give back only what was taken, wherever they are dated.
	now := budgetT0.Add(2 * time.Second)
	if !b.tryRetry(now) {
		t.Fatal("retry refused")
	}
	b.refund(budgetT0) // dated before the take: cancels it all the same
	b.refund(now)
	b.refund(now.Add(time.Second))
	if got := b.balance(now.Add(time.Second)); got != before {
		t.Errorf("balance after 3 refunds of 1 take = %d, want %d", got, before)
	}
}

// TestBudgetRefundAfterSkew: a caller reads the clock, another moves the window
// on before the first takes its token (so the token comes from a newer bucket);
// refunding with the first caller's time still returns that token.
func TestBudgetRefundAfterSkew(t *testing.T) {
	t.Parallel()
	opts := []budgetOption{budgetRatio(1), budgetMinPerSecond(0)}
	b, twin := newBudget(opts...), newBudget(opts...)
	for _, x := range []*Budget{b, twin} {
		x.recordRequest(budgetT0)
		x.recordRequest(budgetT0.Add(3 * time.Second))
	}
	early := budgetT0.Add(2 * time.Second) // read before the other caller's +3s
	if !b.tryRetry(early) {
		t.Fatal("retry refused")
	}
	b.refund(early)
	for _, d := range []time.Duration{3 * time.Second, 10 * time.Second, 12 * time.Second, 13 * time.Second} {
		if got, want := b.balance(budgetT0.Add(d)), twin.balance(budgetT0.Add(d)); got != want {
			t.Errorf("at +%v: balance %d, twin %d", d, got, want)
		}
	}
}

func TestBudgetRefundConcurrent(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetRatio(0.1), budgetMinPerSecond(0))
	for range 50 { // 5 tokens for 16 workers: some retries are refused
		b.recordRequest(budgetT0)
	}
	before := b.balance(budgetT0)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			<-start
			for range 10_000 {
				if b.tryRetry(budgetT0) {
					b.refund(budgetT0)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if after := b.balance(budgetT0); after != before {
		t.Errorf("balance = %d after concurrent take/refund, want %d", after, before)
	}
	if s := b.Stats(); s.RetriesAllowed != s.Refunds || s.RetriesAllowed+s.RetriesDenied != 160_000 {
		t.Errorf("Stats() = %+v", s)
	}
}

func TestBudgetClockGoesBack(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetRatio(1), budgetMinPerSecond(0))
	b.recordRequest(budgetT0.Add(5 * time.Second))
	b.recordRequest(budgetT0) // an earlier reading: counts in the newest bucket
	if got := b.balance(budgetT0.Add(5 * time.Second)); got != 2*budgetScale {
		t.Fatalf("balance = %d, want %d", got, 2*budgetScale)
	}
	if got := b.balance(budgetT0.Add(15 * time.Second)); got != 0 {
		t.Errorf("balance a TTL later = %d, want 0", got)
	}
	// Readings before the first one seen and the zero time do not break anything.
	b.recordRequest(time.Time{})
	if !b.tryRetry(time.Time{}) {
		t.Error("retry refused")
	}
	b.refund(time.Time{})
}

func TestBudgetZeroValue(t *testing.T) {
	t.Parallel()
	var b Budget // defaults: ratio 0.1, 10/s, TTL 10s
	if got, want := b.balance(budgetT0), int64(100*budgetScale); got != want {
		t.Errorf("zero Budget balance = %d, want %d (the reserve of 10/s × 10s)", got, want)
	}
	b.recordRequest(budgetT0)
	if !b.tryRetry(budgetT0) {
		t.Error("zero Budget refused a retry")
	}
	b.holdHost("h", budgetT0.Add(time.Second))
	if got := b.heldUntil("h", budgetT0); !got.Equal(budgetT0.Add(time.Second)) {
		t.Errorf("zero Budget heldUntil = %v", got)
	}
}

func TestBudgetHoldHost(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return budgetT0.Add(time.Duration(s) * time.Second) }
	b := newBudget()
	if got := b.heldUntil("a", at(0)); !got.IsZero() {
		t.Fatalf("unknown host held until %v", got)
	}
	b.holdHost("a", at(10))
	b.holdHost("a", at(5)) // an earlier hold does not shorten it
	if got := b.heldUntil("a", at(1)); !got.Equal(at(10)) {
		t.Errorf("heldUntil = %v, want %v", got, at(10))
	}
	b.holdHost("a", at(20)) // a later one extends it
	if got := b.heldUntil("a", at(1)); !got.Equal(at(20)) {
		t.Errorf("heldUntil = %v, want %v", got, at(20))
	}
	if got := b.heldUntil("b", at(1)); !got.IsZero() {
		t.Errorf("other host held until %v", got)
	}
	if got := b.heldUntil("a", at(19)); !got.Equal(at(20)) {
		t.Errorf("heldUntil just before the end = %v", got)
	}
	if got := b.heldUntil("a", at(20)); !got.IsZero() {
		t.Errorf("heldUntil at the end = %v, want zero", got)
	}
	if got := b.Stats().HeldHosts; got != 0 {
		t.Errorf("expired hold not dropped: %d held", got)
	}
	b.holdHost("c", at(15)) // already over at the latest time seen (20)
	if got := b.Stats().HeldHosts; got != 0 {
		t.Errorf("a hold in the past was stored: %d held", got)
	}
}

func TestBudgetHoldHostBounded(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return budgetT0.Add(time.Duration(s) * time.Second) }
	b := newBudget(budgetMaxHeldHosts(3))
	b.holdHost("a", at(30))
	b.holdHost("b", at(10))
	b.holdHost("c", at(20))
	b.holdHost("d", at(40)) // full: b, which ends soonest, gives way
	want := map[string]time.Time{"a": at(30), "b": {}, "c": at(20), "d": at(40)}
	for h, w := range want {
		if got := b.heldUntil(h, at(0)); !got.Equal(w) {
			t.Errorf("heldUntil(%q) = %v, want %v", h, got, w)
		}
	}
	b.holdHost("e", at(5)) // ends before all others: not stored
	if got := b.heldUntil("e", at(0)); !got.IsZero() {
		t.Errorf("heldUntil(e) = %v, want zero", got)
	}
	// Once c and a have expired (time seen: 35), they are pruned before anyone is evicted.
	if got := b.heldUntil("d", at(35)); !got.Equal(at(40)) {
		t.Fatalf("heldUntil(d) = %v", got)
	}
	b.holdHost("f", at(36))
	b.holdHost("g", at(37))
	for h, w := range map[string]time.Time{"d": at(40), "f": at(36), "g": at(37)} {
		if got := b.heldUntil(h, at(35)); !got.Equal(w) {
			t.Errorf("heldUntil(%q) = %v, want %v", h, got, w)
		}
	}
	if got := b.Stats().HeldHosts; got > 3 {
		t.Errorf("%d hosts held, cap is 3", got)
	}
	// Many distinct hosts never grow the table past the cap.
	for i := range 10_000 {
		b.holdHost(fmt.Sprint("host", i), at(100+i))
	}
	if got := b.Stats().HeldHosts; got != 3 {
		t.Errorf("%d hosts held after 10,000 holds, want the cap 3", got)
	}
}

func TestBudgetHoldHostDisabled(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetMaxHeldHosts(0))
	b.holdHost("a", budgetT0.Add(time.Hour))
	if got := b.heldUntil("a", budgetT0); !got.IsZero() {
		t.Errorf("holding is off, but the host is held until %v", got)
	}
}

func TestBudgetHoldHostConcurrent(t *testing.T) {
	t.Parallel()
	b := newBudget(budgetMaxHeldHosts(8))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			<-start
			for i := range 2000 {
				now := budgetT0.Add(time.Duration(i) * time.Millisecond)
				host := fmt.Sprint("h", (w+i)%12)
				b.holdHost(host, now.Add(50*time.Millisecond))
				if u := b.heldUntil(host, now); !u.IsZero() && !u.After(now) {
					t.Errorf("heldUntil returned %v, not after now %v", u, now)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := b.Stats().HeldHosts; got > 8 {
		t.Errorf("%d hosts held, cap is 8", got)
	}
}

func TestBudgetOptionsPanic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
	}{
		{"ratio negative", func() { budgetRatio(-0.1) }},
		{"ratio NaN", func() { budgetRatio(math.NaN()) }},
		{"ratio +Inf", func() { budgetRatio(math.Inf(1)) }},
		{"ratio too big", func() { budgetRatio(100.5) }},
		{"min negative", func() { budgetMinPerSecond(-1) }},
		{"min too big", func() { budgetMinPerSecond(1_000_001) }},
		{"TTL zero", func() { budgetTTL(0) }},
		{"TTL too short", func() { budgetTTL(999 * time.Millisecond) }},
		{"TTL too long", func() { budgetTTL(time.Hour + 1) }},
		{"max held negative", func() { budgetMaxHeldHosts(-1) }},
		{"nil option", func() { newBudget(nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tt.f()
		})
	}
}

func TestBudgetOptionLimits(t *testing.T) {
	t.Parallel()
	// The largest settings keep the arithmetic exact: MinPerSecond × TTL tokens.
	b := newBudget(budgetRatio(100), budgetMinPerSecond(1_000_000), budgetTTL(time.Hour))
	if got, want := b.balance(budgetT0), int64(1_000_000*3600)*budgetScale; got != want {
		t.Errorf("balance = %d, want %d", got, want)
	}
	b.recordRequest(budgetT0)
	if got, want := b.balance(budgetT0), int64(1_000_000*3600+100)*budgetScale; got != want {
		t.Errorf("balance = %d, want %d", got, want)
	}
}

func TestBudgetHotPathAllocs(t *testing.T) {
	b := newBudget()
	b.holdHost("held", budgetT0.Add(time.Hour))
	now := budgetT0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		b.recordRequest(now)
		if b.tryRetry(now) {
			b.refund(now)
		}
		b.heldUntil("held", now)
		b.heldUntil("other", now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per operation, want 0", allocs)
	}
}

// BenchmarkBudgetParallel measures the hot path of one operation (record it, ask
// for a retry, check the host) on a Budget shared by all goroutines. Compare
// "budget" with "baseline", the same loop around a bare mutex-protected counter,
// and with "nil", a Transport without a budget.
func BenchmarkBudgetParallel(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		var mu sync.Mutex
		var n int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now()
				mu.Lock()
				n += int64(now.Nanosecond() & 1)
				mu.Unlock()
				mu.Lock()
				n--
				mu.Unlock()
			}
		})
	})
	for _, bc := range []struct {
		name   string
		budget *Budget
	}{
		{"nil", nil},
		{"budget", newBudget()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := time.Now()
					bc.budget.recordRequest(now)
					if bc.budget.tryRetry(now) {
						bc.budget.heldUntil("example.com:443", now)
					}
				}
			})
		})
	}
}
