package payments

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Payment is one charge.
type Payment struct {
	ID       string    `json:"id"`
	Customer string    `json:"customer"`
	Amount   int64     `json:"amount"`
	Currency string    `json:"currency"`
	Created  time.Time `json:"created"`
	// Owner is the scope of the caller who made it (see API.Owner); it is
	// never sent, and List answers a caller with its own payments only.
	Owner string `json:"-"`
	// Seq orders a ledger's payments: it grows with each insert, and a
	// page's cursor is the Seq of its last payment. The ledger sets it; it
	// is never sent.
	Seq int64 `json:"-"`
}

// A Ledger records payments. Insert is the business write: a ledger backed by
// the same database as the idempotency store can take the store's transaction
// from ctx, so the payment and the stored response commit together.
type Ledger interface {
	// Insert records p (p.Seq is ignored: the ledger numbers its payments).
	// A ledger that is full returns an error wrapping ErrLedgerFull.
	Insert(ctx context.Context, p Payment) error
	// Page returns the page of payments q asks for.
	Page(ctx context.Context, q Query) (Page, error)
}

// Query asks a Ledger for one page of an owner's payments.
type Query struct {
	Owner    string
	Customer string // "" for every customer of Owner
	After    int64  // the Seq after which the page starts; 0 for the first page
	Limit    int    // at most this many payments, at least 1
}

// Page is one page of payments, oldest first.
type Page struct {
	Payments []Payment
	// Total is how many payments of the query's owner and customer the ledger
	// holds in all, whatever After and Limit say.
	Total int
	// More reports that payments follow the last of this page.
	More bool
}

// ErrLedgerFull is wrapped by Insert's error when a bounded ledger holds as
// many payments as it may, in all or for the payment's owner.
var ErrLedgerFull = errors.New("payments: the ledger is full")

// MemLedger is an in-memory Ledger, safe for concurrent use. Its writes do not
// share a transaction with any store: a crash (or a panic) after Insert and
// before the idempotency record is written leaves the payment in place.
//
// NewMemLedger's ledger has no bound; NewBoundedMemLedger's holds at most a
// given number of payments, shared fairly between owners (see it).
type MemLedger struct {
	mu       sync.Mutex
	payments []Payment
	byOwner  map[string][]int // owner -> indexes into payments, in order
	max      int              // 0: no bound
	share    int              // each owner's guaranteed share of max
}

// NewMemLedger returns an empty ledger with no bound.
func NewMemLedger() *MemLedger { return &MemLedger{byOwner: map[string][]int{}} }

// NewBoundedMemLedger returns an empty ledger that holds at most n payments
// (payments are never deleted: the ledger is the demo's proof of what ran). Each
// owner is guaranteed an eighth of n (at least one): past its share an owner may
// still use free room, but never the last share of the ledger, which stays for the
// owners within theirs, so one owner that floods cannot lock the others out. An
// Insert past these bounds fails with ErrLedgerFull. It panics unless n >= 1.
func NewBoundedMemLedger(n int) *MemLedger {
	if n < 1 {
		panic(fmt.Sprintf("payments: NewBoundedMemLedger(%d): want n >= 1", n))
	}
	return &MemLedger{byOwner: map[string][]int{}, max: n, share: max(1, n/8)}
}

// Insert appends p, numbered one past the ledger's last payment.
func (l *MemLedger) Insert(_ context.Context, p Payment) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 {
		n, own := len(l.payments), len(l.byOwner[p.Owner])
		if n >= l.max || (own >= l.share && n >= l.max-l.share) {
			return fmt.Errorf("%w: %d payments, %d of them the owner's (at most %d, and %d for an owner past its share)",
				ErrLedgerFull, n, own, l.max, l.max-l.share)
		}
	}
	p.Seq = int64(len(l.payments)) + 1
	if l.byOwner == nil { // the zero MemLedger
		l.byOwner = map[string][]int{}
	}
	l.byOwner[p.Owner] = append(l.byOwner[p.Owner], len(l.payments))
	l.payments = append(l.payments, p)
	return nil
}

// Page returns a copy of the page q asks for.
func (l *MemLedger) Page(_ context.Context, q Query) (Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pg := Page{Payments: []Payment{}}
	for _, i := range l.byOwner[q.Owner] {
		p := l.payments[i]
		if q.Customer != "" && p.Customer != q.Customer {
			continue
		}
		pg.Total++
		if p.Seq <= q.After {
			continue
		}
		if len(pg.Payments) == q.Limit {
			pg.More = true
			continue
		}
		pg.Payments = append(pg.Payments, p)
	}
	return pg, nil
}

// List returns a copy of the payments of customer (all when customer is
// empty), whoever made them, oldest first.
func (l *MemLedger) List(_ context.Context, customer string) ([]Payment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Payment, 0, len(l.payments))
	for _, p := range l.payments {
		if customer == "" || p.Customer == customer {
			out = append(out, p)
		}
	}
	return out, nil
}

// Count returns how many payments customer has (all payments when customer is empty).
func (l *MemLedger) Count(customer string) int {
	ps, _ := l.List(context.Background(), customer)
	return len(ps)
}
