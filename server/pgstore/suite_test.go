package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
	"github.com/idemkit/idem/server/storetest"
)

// TestContract runs the store contract suite against PostgreSQL: each scenario
// gets fresh tables, effects written as payments through pgstore.Tx (so the
// payment and the record commit together: Transactional), and an Advance that
// shifts the table's timestamps back, the store's clock being the server's; on
// PostgreSQL directly and through PgBouncer in transaction mode.
func TestContract(t *testing.T) {
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) { contract(t, tp) })
}

func contract(t *testing.T, tp pgtest.Topology) {
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		pool := tp.Pool(t, 32)
		// The store bounds a duplicate's wait by WithLockTimeout: it must be
		// longer than the suite's slowest first request that duplicates wait
		// for (concurrent_duplicates_wait holds its first for 100ms plus the
		// time to see every duplicate arrive), or, under load, they get 409.
		e := newEnvOn(t, pool, pgtest.Table(t, pool, "idem_suite"), pgtest.Table(t, pool, "pay_suite"),
			pgstore.WithLockTimeout(5*time.Second))
		return storetest.Fixture{
			Store:         e.store,
			Advance:       func(d time.Duration) { pgtest.Advance(t, pool, e.table, d) },
			Effects:       ledgerEffects{e},
			Transactional: true,
			// A crash of the owner's process: PostgreSQL ends its session,
			// which rolls its transaction back and releases the key's lock.
			OwnerGone: func(t *testing.T, ctx context.Context) server.Store {
				pgtest.EndSession(t, pgstore.Tx(ctx))
				return e.store
			},
		}
	})
}

// ledgerEffects records the suite handler's effects as payments of the
// operation (the customer), through the request's pgstore transaction.
type ledgerEffects struct{ e env }

func (l ledgerEffects) Insert(ctx context.Context, op string) error {
	p := paymentFor(ctx)
	p.Customer = op
	return l.e.ledger.insert(ctx, p)
}

func (l ledgerEffects) Count(ctx context.Context, op string) (int, error) {
	return l.e.ledger.count(ctx, op)
}
