package e2e

import (
	"testing"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// storeCase is an idempotency store the soak runs on.
type storeCase struct {
	name string
	// open returns a fresh store for one test (its own table or key prefix),
	// cleaned up when the test ends; it skips the test, or fails it with
	// IDEM_REQUIRE_SERVICES=1, when the store's service cannot be reached.
	open func(t *testing.T) server.Store
}

// storeCases are the stores of the soak.
var storeCases = []storeCase{
	{"memory", func(*testing.T) server.Store { return memstore.New() }},
	{"postgres", openPostgres},
	{"redis", openRedis},
}
