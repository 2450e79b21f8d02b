package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/payments"
)

// errNotBuiltIn is wrapped by openStore's error for a store this binary lacks.
var errNotBuiltIn = errors.New("not built into this binary yet")

// openStore opens the idempotency store cfg names and the ledger the payments
// API writes to. cleanup releases both; call it after the server has stopped.
func openStore(_ context.Context, cfg config) (server.Store, payments.Ledger, func(), error) {
	switch cfg.store {
	case storeMemory:
		return memstore.New(memstore.WithMaxEntries(cfg.maxEntries)), payments.NewMemLedger(), func() {}, nil
	case storePostgres, storeRedis:
		return nil, nil, nil, fmt.Errorf("-store %s: %w (only -store memory is)", cfg.store, errNotBuiltIn)
	}
	return nil, nil, nil, fmt.Errorf("-store %q: %w", cfg.store, errUsage)
}
