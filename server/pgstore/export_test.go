package pgstore

import "github.com/idemkit/idem/server"

// KeyLock is keyLock, for the tests that wait until a duplicate waits for it.
func (s *Store) KeyLock(req server.Request) int64 { return s.keyLock(req) }

// Waiting is how many Do calls wait for another request's key, between looks
// or looking.
func (s *Store) Waiting() int { return int(s.waiting.Load()) }
