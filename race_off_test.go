//go:build !race

package idem

// raceEnabled: the tests run under the race detector, whose instrumentation
// moves some values to the heap (crypto/rand.Read's buffer, in newKey).
const raceEnabled = false
