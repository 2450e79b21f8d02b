package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// honoursDeadlines reports whether client bounds its socket reads and writes
// by the deadline of each call's context (go-redis's ContextTimeoutEnabled).
// Without it a command waits for the client's own ReadTimeout (5 s by
// default) whatever the context says, so the store bounds its calls itself
// (see call).
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// call runs f with ctx and returns what it returns, or, once ctx is done,
// ctx's cause at once. With direct (a client that honours deadlines) f runs
// in the caller's goroutine. Otherwise it runs in a goroutine of its own that
// go-redis ends at its ReadTimeout, holding one pooled connection until then:
// the caller is answered within ctx's deadline either way.
func call[T any](ctx context.Context, direct bool, f func(context.Context) (T, error)) (T, error) {
	if direct {
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w (the Redis client ignores context deadlines: set ContextTimeoutEnabled)", context.Cause(ctx))
	}
}

// refreshOnError asks a Cluster client to reload its slot map after a call
// failed on Redis's side or the network's (a refused or timed-out connection,
// MOVED, CLUSTERDOWN, READONLY...): after a failover, the failed master's
// slots then reach the promoted replica at once, not at go-redis's periodic
// refresh (every minute). Errors that are the store's own verdicts (the key is
// another owner's, the replicas did not acknowledge) say nothing about the
// topology. go-redis coalesces reloads (one at a time, 200 ms apart), so a
// burst of failures costs one CLUSTER SLOTS, not one each.
func (s *Store) refreshOnError(err error) {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok || err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotReplicated) {
		return
	}
	c.ReloadState(context.Background())
}
