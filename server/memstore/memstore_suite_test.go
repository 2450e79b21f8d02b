package memstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/storetest"
)

// TestContract runs the shared Store contract suite on a Store with a fake
// clock that the suite advances. It has no Fixture.OwnerGone: memstore makes
// no durable effect mark (server.BeginEffect only sets the request's flag),
// since a crash of its process loses every record with it, marks included;
// the owner-gone scenarios are skipped.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		var (
			mu  sync.Mutex
			now = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		)
		clock := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
		advance := func(d time.Duration) {
			mu.Lock()
			now = now.Add(d)
			mu.Unlock()
		}
		return storetest.Fixture{
			Store:   memstore.New(memstore.WithClock(clock)),
			Advance: advance,
		}
	})
}
