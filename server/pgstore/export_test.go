package pgstore

import (
	"time"

	"github.com/idemkit/idem/server"
)

// KeyLock is keyLock, for the tests that wait until a duplicate waits for it.
func (s *Store) KeyLock(req server.Request) int64 { return s.keyLock(req) }

// Waiting is how many Do calls wait for another request's key, between looks
// or looking.
func (s *Store) Waiting() int { return int(s.waiting.Load()) }

// SetNow sets the clock of the store's usage counts (WithScopeLimits).
func (s *Store) SetNow(now func() time.Time) { s.now = now }

// Charge is what a record of resp for req is counted as until the next count.
func Charge(req server.Request, owner string, resp *server.Response) int64 {
	return charge(req, owner, resp)
}
