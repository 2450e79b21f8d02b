package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/storetest"
)

// TestContract runs the store contract suite (CONTRACT.md §3, §4) against a
// real Redis, each scenario under its own key prefix. The store under test
// has a client of its own, which OwnerGone cuts off from Redis (its commands
// held until the scenario ends), as a crash of its process would: its lease
// is no longer renewed, and the retries go to another store over the same
// keys, the restarted process.
func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		c := sharedRedis(t)
		prefix := testPrefix(t, c)
		owner := newClient(t)
		cut := &cutOff{}
		owner.AddHook(cut)
		return storetest.Fixture{
			Store:         New(owner, WithPrefix(prefix)),
			Advance:       func(d time.Duration) { advance(t, c, prefix, d) },
			Transactional: false, // Redis cannot share the ledger's transaction
			OwnerGone: func(t *testing.T, _ context.Context) server.Store {
				cut.disconnect()
				t.Cleanup(cut.reconnect) // after the scenario's server has stopped
				return New(c, WithPrefix(prefix))
			},
		}
	})
}
