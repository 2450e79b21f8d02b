package pgstore

import "github.com/idemkit/idem/server"

// KeyLock is keyLock, for the tests that wait until a duplicate waits for it.
func (s *Store) KeyLock(req server.Request) int64 { return s.keyLock(req) }
