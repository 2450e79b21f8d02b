package redisstore

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// 50 goroutines send the same key at once: exactly one runs the handler, and
// every other one is told the request is in progress (the handler waits until
// all 49 have their answer, so none of them can see the finished record).
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	s, _ := newTestStore(t)
	var runs atomic.Int32
	answered := make(chan server.Outcome, n)
	run := func(context.Context) (*server.Response, bool) {
		runs.Add(1)
		for range n - 1 {
			select {
			case <-answered:
			case <-time.After(30 * time.Second):
				t.Error("duplicates did not all answer: did a second handler run?")
				return response(500, ""), false
			}
		}
		return response(201, "once"), true
	}
	start := make(chan struct{})
	results := make([]server.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := s.Do(context.Background(), req("same", "fp"), run)
			if err != nil {
				t.Errorf("Do: %v", err)
			}
			results[i] = res
			if res.Outcome != server.OutcomeExecuted {
				answered <- res.Outcome
			}
		})
	}
	close(start)
	wg.Wait()
	counts := map[server.Outcome]int{}
	for _, r := range results {
		counts[r.Outcome]++
	}
	if runs.Load() != 1 || counts[server.OutcomeExecuted] != 1 || counts[server.OutcomeInProgress] != n-1 {
		t.Fatalf("handler ran %d times; outcomes %v; want 1 executed, %d in-progress", runs.Load(), counts, n-1)
	}
}

// Property: random binary responses (NUL bytes, newlines, invalid UTF-8,
// repeated header values) come back from Redis byte for byte.
func TestBinaryRoundTripThroughRedis(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	for i := range 100 {
		want := randomResponse(rng)
		fp := string(randomResponse(rng).Body) // fingerprints are compared as bytes too
		r := req(randomKey(rng), fp)
		calls := 0
		mustDo(t, s, r, respond(&calls, want))
		got := mustDo(t, s, r, neverRun(t))
		if got.Outcome != server.OutcomeReplayed || !sameResponse(got.Response, want) {
			t.Fatalf("case %d (seed %d): replay %+v, want %+v", i, seed, got.Response, want)
		}
	}
}

// randomKey returns a valid Idempotency-Key: 1 to 255 visible ASCII characters.
func randomKey(rng *rand.Rand) string {
	b := make([]byte, 1+rng.IntN(255))
	for i := range b {
		b[i] = byte('!' + rng.IntN('~'-'!'+1))
	}
	return string(b)
}
