package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Check verifies that Redis will not evict the store's records: every master's
// maxmemory-policy must be noeviction (unless WithEvictionAllowed). An evicted
// record turns its key into a new operation, so a retry would run the handler
// again; every record has a TTL, so the volatile-* policies take them as
// surely as allkeys-*. Check returns an error wrapping ErrEvictionPolicy
// naming the node and its policy, or the error met reaching Redis.
//
// A Redis that refuses CONFIG GET (renamed or disabled, as managed services
// often do, or an ACL without it) cannot be checked: Check logs a warning (see
// WithLogger) and passes; making sure of the policy is then the operator's
// job. Do calls Check on its first use, and again until one succeeds; servers
// should call it at start to refuse to start on an unsafe Redis.
func (s *Store) Check(ctx context.Context) error {
	err := s.check(ctx)
	if err == nil {
		s.checked.Store(true) // Do need not ask again
	}
	return err
}

func (s *Store) check(ctx context.Context) error {
	if s.cfg.evictionAllowed {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	check := func(ctx context.Context, node *redis.Client) error {
		name := node.Options().Addr
		if name == "FailoverClient" { // go-redis's name for a Sentinel client
			name = "the Sentinel master"
		}
		policy, err := node.ConfigGet(ctx, "maxmemory-policy").Result()
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr):
			if s.cfg.logger != nil {
				s.cfg.logger.Warn("redisstore: cannot read maxmemory-policy; make sure it is noeviction", "node", name, "err", err)
			}
			return nil
		case err != nil:
			return fmt.Errorf("redisstore: reading maxmemory-policy of %s: %w", name, err)
		}
		if p, ok := policy["maxmemory-policy"]; ok && p != "noeviction" {
			return fmt.Errorf("%w: %s has maxmemory-policy %s; set it to noeviction, or opt in with WithEvictionAllowed (idem-server: -redis-allow-eviction)",
				ErrEvictionPolicy, name, p)
		}
		return nil
	}
	_, err := call(ctx, s.direct, func(ctx context.Context) (struct{}, error) {
		switch c := s.client.(type) {
		case *redis.ClusterClient:
			return struct{}{}, c.ForEachMaster(ctx, check)
		case *redis.Client:
			return struct{}{}, check(ctx, c)
		case *redis.Ring:
			return struct{}{}, c.ForEachShard(ctx, check)
		}
		return struct{}{}, fmt.Errorf("redisstore: Check: unsupported client %T", s.client)
	})
	return err
}

// checkOnce runs Check until it succeeds once.
func (s *Store) checkOnce(ctx context.Context) error {
	if s.checked.Load() {
		return nil
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if s.checked.Load() {
		return nil
	}
	return s.Check(ctx)
}

// Ping implements server.Pinger: it reports whether the store can serve a Do
// now, by a PING to every master that holds its keys (the one master of a
// standalone or Sentinel client, each master of a Cluster or shard of a Ring),
// bounded by the op timeout and ctx. A readiness check calls it (idem-server's
// /readyz).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	ping := func(ctx context.Context, node *redis.Client) error { return node.Ping(ctx).Err() }
	_, err := call(ctx, s.direct, func(ctx context.Context) (struct{}, error) {
		switch c := s.client.(type) {
		case *redis.ClusterClient:
			return struct{}{}, c.ForEachMaster(ctx, ping)
		case *redis.Ring:
			return struct{}{}, c.ForEachShard(ctx, ping)
		}
		return struct{}{}, s.client.Ping(ctx).Err()
	})
	if err != nil {
		s.refreshOnError(err)
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}
