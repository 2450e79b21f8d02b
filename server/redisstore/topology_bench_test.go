package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/server"
)

// BenchmarkDoTopology measures first executions (a new key each: claim and
// finish) in parallel, straight on the store, on each Redis topology whose
// variables are set: one node, a Cluster, Sentinel, and Sentinel with
// WithMinReplicas(1) (two WAITs per operation). Each reports "x-single", its
// ns/op divided by the single node's in the same run.
func BenchmarkDoTopology(b *testing.B) {
	var single float64
	for _, tc := range []struct {
		name   string
		client func(b *testing.B) redis.UniversalClient
		opts   []Option
	}{
		{"single", func(b *testing.B) redis.UniversalClient { return sharedRedis(b) }, nil},
		{"cluster", func(b *testing.B) redis.UniversalClient { return clusterClient(b) }, nil},
		{"sentinel", func(b *testing.B) redis.UniversalClient { return sentinelClient(b) }, nil},
		{"sentinel WAIT 1", func(b *testing.B) redis.UniversalClient { return sentinelClient(b) },
			[]Option{WithMinReplicas(1, time.Second)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := tc.client(b)
			s := New(c, append([]Option{WithPrefix(testPrefix(b, c))}, tc.opts...)...)
			var seq atomic.Int64
			resp := response(201, "ok")
			run := func(context.Context) (*server.Response, bool) { return resp, true }
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := req("k"+strconv.FormatInt(seq.Add(1), 10), "fp")
					if _, err := s.Do(context.Background(), r, run); err != nil {
						b.Fatal(err)
					}
				}
			})
			nsop := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if tc.name == "single" {
				single = nsop
			} else if single > 0 {
				b.ReportMetric(nsop/single, "x-single")
			}
		})
	}
}
