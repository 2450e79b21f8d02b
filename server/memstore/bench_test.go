package memstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// singleLockStore is the baseline the benchmarks compare Store with: the same
// claim/record/replay work (copies included) behind one mutex and no expiry.
type singleLockStore struct {
	mu sync.Mutex
	m  map[recordKey]*server.Response // nil value: claimed
}

func (b *singleLockStore) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	k := recordKey{scope: req.Scope, key: req.Key}
	b.mu.Lock()
	if resp, ok := b.m[k]; ok {
		b.mu.Unlock()
		if resp == nil {
			return server.Result{Outcome: server.OutcomeInProgress}, nil
		}
		return server.Result{Outcome: server.OutcomeReplayed, Response: cloneResponse(resp)}, nil
	}
	b.m[k] = nil
	b.mu.Unlock()
	resp, _ := run(ctx)
	stored := cloneResponse(resp)
	b.mu.Lock()
	b.m[k] = stored
	b.mu.Unlock()
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
}

// BenchmarkDo measures Do under parallel load against the single-lock
// baseline in the same run: compare each memstore line with its baseline line.
func BenchmarkDo(b *testing.B) {
	resp := sampleResponse()
	run := func(context.Context) (*server.Response, bool) { return resp, true }
	stores := []struct {
		name string
		make func() server.Store
	}{
		{"baseline", func() server.Store { return &singleLockStore{m: make(map[recordKey]*server.Response)} }},
		{"memstore", func() server.Store { return New(WithMaxEntries(1<<30), WithMaxBytes(1<<40), WithScopeShare(1)) }},
	}
	for _, st := range stores {
		b.Run("execute/"+st.name, func(b *testing.B) {
			s := st.make()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := server.Request{Scope: "bench", Key: fmt.Sprint(next.Add(1)), Fingerprint: "fp", TTL: time.Hour}
					if _, err := s.Do(context.Background(), req, run); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		b.Run("replay-1024-keys/"+st.name, func(b *testing.B) {
			s := st.make()
			for i := range 1024 {
				req := server.Request{Scope: "bench", Key: fmt.Sprint(i), Fingerprint: "fp", TTL: time.Hour}
				if _, err := s.Do(context.Background(), req, run); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				req := server.Request{Scope: "bench", Fingerprint: "fp", TTL: time.Hour}
				for pb.Next() {
					req.Key = fmt.Sprint(next.Add(1) % 1024)
					if res, err := s.Do(context.Background(), req, run); err != nil || res.Outcome != server.OutcomeReplayed {
						b.Fatal(res.Outcome, err)
					}
				}
			})
		})
	}
}
