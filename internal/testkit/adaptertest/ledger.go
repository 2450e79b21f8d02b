package adaptertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
)

// ErrUnavailable is what Ledger.Charge returns when a scenario makes it fail
// before charging: the service answers 503 through its framework's error
// path (gin: c.Error answered by an error-handling middleware; echo: a
// returned *echo.HTTPError).
var ErrUnavailable = errors.New("adaptertest: ledger unavailable, nothing charged")

// ErrReceipt is what Ledger.After returns when a scenario makes the step
// after the charge fail: the service has declared its effect and answers 500.
var ErrReceipt = errors.New("adaptertest: the receipt step failed after the charge")

// PanicBeforeCharge is the value Ledger.Charge panics with, before charging,
// when a scenario asks for a panic.
const PanicBeforeCharge = "adaptertest: panic before the charge"

// Charge is one effect of the service: the body of its 201.
type Charge struct {
	ID     string `json:"id"`
	Op     string `json:"op"`
	Amount int64  `json:"amount"`
}

// Ledger is the effect the service under test makes, and what the
// scenarios count: how often the handler was entered and charged, per
// operation. Scenarios arm it to fail, panic or hold the next charge.
type Ledger struct {
	mu        sync.Mutex
	entered   map[string]int
	charges   map[string][]Charge
	failNext  map[string]int
	panicNext map[string]int
	failAfter map[string]int
	holds     map[string]*hold
}

// hold blocks one charge of an operation until released.
type hold struct {
	entered, release chan struct{}
	used             bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{entered: map[string]int{}, charges: map[string][]Charge{}, failNext: map[string]int{},
		panicNext: map[string]int{}, failAfter: map[string]int{}, holds: map[string]*hold{}}
}

// Enter is the first thing the service's handler calls, so that the
// scenarios see every run of the handler, charged or not.
func (l *Ledger) Enter(op string) {
	l.mu.Lock()
	l.entered[op]++
	l.mu.Unlock()
}

// Charge is the service's effect: it charges amount for op and returns the
// charge, or fails with ErrUnavailable (nothing charged), or panics with
// PanicBeforeCharge (nothing charged), as the scenario armed it.
func (l *Ledger) Charge(op string, amount int64) (Charge, error) {
	l.mu.Lock()
	h := l.holds[op]
	if h != nil && !h.used {
		h.used = true
		l.mu.Unlock()
		close(h.entered)
		<-h.release
		l.mu.Lock()
	}
	if l.panicNext[op] > 0 {
		l.panicNext[op]--
		l.mu.Unlock()
		panic(PanicBeforeCharge)
	}
	if l.failNext[op] > 0 {
		l.failNext[op]--
		l.mu.Unlock()
		return Charge{}, ErrUnavailable
	}
	c := Charge{ID: "ch_" + randomHex(8), Op: op, Amount: amount}
	l.charges[op] = append(l.charges[op], c)
	l.mu.Unlock()
	return c, nil
}

// After is the service's step after the charge (a receipt): ErrReceipt when
// the scenario armed it to fail.
func (l *Ledger) After(op string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failAfter[op] > 0 {
		l.failAfter[op]--
		return ErrReceipt
	}
	return nil
}

// Entered returns how many times the handler ran for op.
func (l *Ledger) Entered(op string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entered[op]
}

// Charges returns op's charges.
func (l *Ledger) Charges(op string) []Charge {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Charge(nil), l.charges[op]...)
}

func (l *Ledger) armFail(op string, n int) {
	l.mu.Lock()
	l.failNext[op] += n
	l.mu.Unlock()
}

func (l *Ledger) armPanic(op string, n int) {
	l.mu.Lock()
	l.panicNext[op] += n
	l.mu.Unlock()
}

func (l *Ledger) armFailAfter(op string, n int) {
	l.mu.Lock()
	l.failAfter[op] += n
	l.mu.Unlock()
}

// holdNext blocks op's next charge: entered closes when it arrives, and it
// goes on when release is closed.
func (l *Ledger) holdNext(op string) (entered <-chan struct{}, release chan struct{}) {
	h := &hold{entered: make(chan struct{}), release: make(chan struct{})}
	l.mu.Lock()
	l.holds[op] = h
	l.mu.Unlock()
	return h.entered, h.release
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
