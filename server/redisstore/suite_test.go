package redisstore

import (
	"testing"
	"time"

	"github.com/idemkit/idem/server/storetest"
)

// TestContract runs the store contract suite (CONTRACT.md §3, §4) against a
// real Redis, each scenario under its own key prefix.
func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		c := sharedRedis(t)
		prefix := testPrefix(t, c)
		return storetest.Fixture{
			Store:         New(c, WithPrefix(prefix)),
			Advance:       func(d time.Duration) { advance(t, c, prefix, d) },
			Transactional: false, // Redis cannot share the ledger's transaction
		}
	})
}
