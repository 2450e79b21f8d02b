package storetest

import (
	"context"
	"sync"
)

// Effects records the business writes of the suite's handler: one Insert per
// execution of the handler, and Count is how each scenario proves that an
// operation took effect at most once.
//
// A store whose transaction the handler's writes can join passes an Effects
// that writes through it (pgstore: an Insert that uses pgstore.Tx(ctx)), and
// sets Fixture.Transactional.
type Effects interface {
	// Insert records one effect of the operation op. ctx is the context the
	// store gave the handler (it may carry the store's transaction).
	Insert(ctx context.Context, op string) error
	// Count returns how many effects of op are recorded (committed).
	Count(ctx context.Context, op string) (int, error)
}

// memEffects is the Effects of a fixture that names none: a map in memory,
// which shares no transaction with any store.
type memEffects struct {
	mu sync.Mutex
	n  map[string]int
}

func newMemEffects() *memEffects { return &memEffects{n: map[string]int{}} }

func (m *memEffects) Insert(_ context.Context, op string) error {
	m.mu.Lock()
	m.n[op]++
	m.mu.Unlock()
	return nil
}

func (m *memEffects) Count(_ context.Context, op string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[op], nil
}
