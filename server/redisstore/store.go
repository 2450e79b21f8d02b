package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/server"
)

// Store is a server.Store backed by Redis. Create it with New; it is safe for
// concurrent use by any number of goroutines and processes sharing the same
// Redis and prefix.
type Store struct {
	client redis.UniversalClient
	cfg    config
}

var _ server.Store = (*Store)(nil)

// New returns a Store that keeps its records in Redis through client, which may
// be a standalone, Sentinel (failover) or Cluster client. The store does not own
// the client: closing it is the caller's job. New panics if client is nil or an
// option is invalid, naming the option.
func New(client redis.UniversalClient, opts ...Option) *Store {
	if client == nil {
		panic("redisstore: New: nil client")
	}
	cfg := config{prefix: DefaultPrefix, opTimeout: DefaultOpTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	return &Store{client: client, cfg: cfg}
}

// ErrInvalidRequest is wrapped by Do's error when the server.Request cannot be
// stored (empty key, non-positive TTL or LockTTL). run is not called.
var ErrInvalidRequest = errors.New("redisstore: invalid request")

// Do implements server.Store. See the package documentation for the Redis
// commands it sends and what each outcome costs.
func (s *Store) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	if err := checkRequest(req); err != nil {
		return server.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return server.Result{}, fmt.Errorf("redisstore: claim: %w", context.Cause(ctx))
	}
	key := s.key(req.Scope, req.Key)
	var token [tokenLen]byte
	_, _ = rand.Read(token[:]) // crypto/rand.Read never fails
	claim := encodeClaim(token, req.Fingerprint)

	granted := time.Now() // the lease runs from no later than this
	held, pttl, err := s.claim(ctx, key, claim, req.LockTTL)
	if err != nil {
		return server.Result{}, err
	}
	if held != nil {
		return answerExisting(held, pttl, req.Fingerprint)
	}
	return s.execute(ctx, key, claim, req, granted, run)
}

func checkRequest(req server.Request) error {
	switch {
	case req.Key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidRequest)
	case req.TTL <= 0:
		return fmt.Errorf("%w: TTL %v is not positive", ErrInvalidRequest, req.TTL)
	case req.LockTTL <= 0:
		return fmt.Errorf("%w: LockTTL %v is not positive", ErrInvalidRequest, req.LockTTL)
	}
	return nil
}

// key returns the Redis key of (scope, key): the prefix, the hex SHA-256 of the
// scope and the key. Scopes are hashed so that no scope, whatever it contains,
// can produce another scope's keys; idempotency keys are visible ASCII and
// cannot contain the separator's role (the scope part has a fixed length).
func (s *Store) key(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	b := make([]byte, 0, len(s.cfg.prefix)+2*len(sum)+1+len(key))
	b = append(b, s.cfg.prefix...)
	b = hex.AppendEncode(b, sum[:])
	b = append(b, ':')
	return string(append(b, key...))
}

// claim runs claimScript. It returns held == nil when the claim is now the
// caller's, else the value that holds the key and its remaining time to live.
func (s *Store) claim(ctx context.Context, key string, claim []byte, lockTTL time.Duration) (held []byte, pttl time.Duration, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	res, err := claimScript.Run(cctx, s.client, []string{key}, claim, millis(lockTTL)).Result()
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			// The request went away while the claim was in flight: Redis may
			// have set it. Free it now rather than block the key for LockTTL.
			_ = s.release(ctx, key, claim)
		}
		return nil, 0, fmt.Errorf("redisstore: claim: %w", err)
	}
	switch r := res.(type) {
	case int64:
		if r == 1 {
			return nil, 0, nil
		}
	case []any:
		if len(r) == 2 {
			v, okV := r[0].(string)
			ms, okT := r[1].(int64)
			if okV && okT {
				if v == string(claim) {
					// A client-side retry of a claim whose first attempt
					// succeeded: the claim is ours.
					return nil, 0, nil
				}
				return []byte(v), time.Duration(max(ms, 0)) * time.Millisecond, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("redisstore: claim: unexpected reply %T %v", res, res)
}

// answerExisting turns the value that holds the key into Do's result.
func answerExisting(held []byte, pttl time.Duration, fingerprint string) (server.Result, error) {
	e, err := decodeEntry(held)
	if err != nil {
		return server.Result{}, fmt.Errorf("redisstore: reading the stored value: %w", err)
	}
	switch {
	case e.fingerprint != fingerprint:
		return server.Result{Outcome: server.OutcomeMismatch}, nil
	case e.claim:
		return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: pttl}, nil
	}
	return server.Result{Outcome: server.OutcomeReplayed, Response: e.resp}, nil
}

// execute runs the handler under the claim, renewing its lease, and then
// records the response or releases the claim.
func (s *Store) execute(ctx context.Context, key string, claim []byte, req server.Request, granted time.Time, run server.RunFunc) (server.Result, error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := s.startLease(key, claim, req.LockTTL, granted, cancel)

	returned := false
	defer func() {
		if !returned { // run panicked (or called runtime.Goexit): release, let it go on
			_ = l.stop()
			_ = s.release(ctx, key, claim)
		}
	}()
	resp, keep := run(hctx)
	returned = true

	if err := l.stop(); err != nil {
		// The claim may still be ours if Redis only failed for a while; a
		// compare-and-set release cannot hurt a newer owner.
		_ = s.release(ctx, key, claim)
		return server.Result{}, fmt.Errorf("redisstore: %w: %w", server.ErrNotRecorded, err)
	}
	if !keep || resp == nil {
		if err := s.release(ctx, key, claim); err != nil {
			return server.Result{}, fmt.Errorf("redisstore: %w: %w", server.ErrNotRecorded, err)
		}
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	}
	if err := s.finish(ctx, key, claim, encodeRecord(req.Fingerprint, resp), req.TTL); err != nil {
		return server.Result{}, err
	}
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
}

// finish runs finishScript with a context detached from the request.
func (s *Store) finish(ctx context.Context, key string, claim, record []byte, ttl time.Duration) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.opTimeout)
	defer cancel()
	n, err := finishScript.Run(dctx, s.client, []string{key}, claim, record, millis(ttl)).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: %w: recording the response: %w", server.ErrNotRecorded, err)
	case n != 1:
		return fmt.Errorf("redisstore: %w: %w: the claim expired or another owner holds the key", server.ErrNotRecorded, ErrLeaseLost)
	}
	return nil
}

// release runs releaseScript with a context detached from the request. It
// returns an error wrapping ErrLeaseLost when another owner holds the key; a
// Redis error is not reported, since the claim then expires by itself within
// LockTTL.
func (s *Store) release(ctx context.Context, key string, claim []byte) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.opTimeout)
	defer cancel()
	n, err := releaseScript.Run(dctx, s.client, []string{key}, claim).Int64()
	if err == nil && n != 1 {
		return fmt.Errorf("%w: another owner holds the key", ErrLeaseLost)
	}
	return nil
}

// millis converts d to whole milliseconds for PX and PEXPIRE, rounding up so a
// positive duration never becomes 0.
func millis(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}
