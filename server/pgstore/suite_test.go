package pgstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
	"github.com/idemkit/idem/server/storetest"
)

// TestContract runs the store contract suite against PostgreSQL: each scenario
// gets fresh tables, a payments ledger that writes through pgstore.Tx (so the
// payment and the record commit together: Transactional), and an Advance that
// shifts the table's timestamps back, the store's clock being the server's; on
// PostgreSQL directly and through PgBouncer in transaction mode.
func TestContract(t *testing.T) {
	eachTopology(t, func(t *testing.T, tp pgtest.Topology) { contract(t, tp) })
}

func contract(t *testing.T, tp pgtest.Topology) {
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		pool := tp.Pool(t, 32)
		e := newEnvOn(t, pool, pgtest.Table(t, pool, "idem_suite"), pgtest.Table(t, pool, "pay_suite"),
			pgstore.WithLockTimeout(200*time.Millisecond))
		return storetest.Fixture{
			Store:         e.store,
			Advance:       func(d time.Duration) { pgtest.Advance(t, pool, e.table, d) },
			Ledger:        e.ledger,
			Transactional: true,
		}
	})
}
