package payments

import (
	"context"
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
}

// A Ledger records payments. Insert is the business write: a ledger backed by
// the same database as the idempotency store can take the store's transaction
// from ctx, so the payment and the stored response commit together.
type Ledger interface {
	Insert(ctx context.Context, p Payment) error
	// List returns the payments of customer, oldest first; every payment when
	// customer is empty.
	List(ctx context.Context, customer string) ([]Payment, error)
}

// MemLedger is an in-memory Ledger, safe for concurrent use. Its writes do not
// share a transaction with any store: a crash (or a panic) after Insert and
// before the idempotency record is written leaves the payment in place.
type MemLedger struct {
	mu       sync.Mutex
	payments []Payment
}

// NewMemLedger returns an empty ledger.
func NewMemLedger() *MemLedger { return &MemLedger{} }

// Insert appends p.
func (l *MemLedger) Insert(_ context.Context, p Payment) error {
	l.mu.Lock()
	l.payments = append(l.payments, p)
	l.mu.Unlock()
	return nil
}

// List returns a copy of the payments of customer (all when customer is empty).
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
