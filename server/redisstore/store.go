package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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
	direct bool // client honours context deadlines: call need not add a goroutine

	checkMu sync.Mutex
	checked atomic.Bool // Check passed once: Do does not ask again

	// onPoll, when set (tests), is called each time a waiting Do finds the
	// owner still running, before it sleeps.
	onPoll func()
	// onSettled, when set (tests), is called when a background settle ends.
	onSettled func()
}

var (
	_ server.Store  = (*Store)(nil)
	_ server.Pinger = (*Store)(nil)
)

// New returns a Store that keeps its records in Redis through client, which may
// be a standalone, Sentinel (failover) or Cluster client. The store does not own
// the client: closing it is the caller's job. New panics if client is nil, an
// option is nil, or WithMinReplicas is given with a client that cannot WAIT
// (see WithMinReplicas). New does not contact Redis: Check, or the first Do,
// verifies its eviction policy.
func New(client redis.UniversalClient, opts ...Option) *Store {
	if client == nil {
		panic("redisstore: New(nil): want a Redis client")
	}
	cfg := config{prefix: DefaultPrefix, opTimeout: DefaultOpTimeout, settleReplicasFor: defaultSettleReplicasFor}
	for _, o := range opts {
		if o == nil {
			panic("redisstore: New(nil Option): want an Option")
		}
		o(&cfg)
	}
	if cfg.minReplicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			panic(fmt.Sprintf("redisstore: New(%T): want a *redis.Client or *redis.ClusterClient for WithMinReplicas", client))
		}
	}
	return &Store{client: client, cfg: cfg, direct: honoursDeadlines(client)}
}

// ErrInvalidRequest is wrapped by Do's error when the server.Request cannot be
// stored (empty key, non-positive TTL or LockTTL, negative Wait). run is not
// called.
var ErrInvalidRequest = errors.New("redisstore: invalid request")

// Polling while a duplicate waits for the owner (Request.Wait): the first
// look after pollFirst, doubling up to pollCap.
const (
	pollFirst = 5 * time.Millisecond
	pollCap   = 50 * time.Millisecond
)

// Do implements server.Store. docs/stores.md in the repository lists the
// Redis commands it sends and what each outcome costs.
func (s *Store) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	if err := checkRequest(req); err != nil {
		return server.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return server.Result{}, fmt.Errorf("redisstore: claim: %w", context.Cause(ctx))
	}
	if err := s.checkOnce(ctx); err != nil {
		return server.Result{}, err
	}
	key := s.key(req.Scope, req.Key)
	var token [tokenLen]byte
	_, _ = rand.Read(token[:]) // crypto/rand.Read never fails
	claim := encodeClaim(token, req.Fingerprint)

	waitUntil := time.Now().Add(req.Wait)
	poll := pollFirst
	var waitStart time.Time  // when a look first found the key claimed
	var waited time.Duration // Result.Waited: from waitStart to the last look
	for {
		granted := time.Now() // the lease runs from no later than this
		if !waitStart.IsZero() {
			waited = granted.Sub(waitStart)
		}
		held, pttl, err := s.acquire(ctx, key, claim, req)
		if err != nil {
			return server.Result{}, err
		}
		if held == nil {
			res, err := s.execute(ctx, key, claim, req, granted, run)
			res.Waited = waited
			return res, err
		}
		res, err := answerExisting(held, pttl, req.Fingerprint)
		res.Waited = waited
		if err != nil || res.Outcome != server.OutcomeInProgress {
			return res, err
		}
		// Another owner runs the handler: look again until it finishes
		// (replay), releases (claim and run), or the wait is over. A waiter
		// holds nothing in Redis: each look is one claim script.
		sleep := min(poll, time.Until(waitUntil))
		if sleep <= 0 {
			if !waitStart.IsZero() {
				res.Waited = time.Since(waitStart)
			}
			return res, nil
		}
		if waitStart.IsZero() {
			waitStart = time.Now()
		}
		if s.onPoll != nil {
			s.onPoll()
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			res.Waited = time.Since(waitStart)
			return res, nil // the client left: it no longer waits for an answer
		case <-t.C:
		}
		poll = min(2*poll, pollCap)
	}
}

func checkRequest(req server.Request) error {
	switch {
	case req.Key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidRequest)
	case req.TTL <= 0:
		return fmt.Errorf("%w: TTL %v is not positive", ErrInvalidRequest, req.TTL)
	case req.LockTTL <= 0:
		return fmt.Errorf("%w: LockTTL %v is not positive", ErrInvalidRequest, req.LockTTL)
	case req.Wait < 0:
		return fmt.Errorf("%w: Wait %v is negative", ErrInvalidRequest, req.Wait)
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

// claim runs claimScript over c (s.client, or a connection of acquire's that
// the caller bounds). It returns held == nil when the claim is now the
// caller's, else the value that holds the key and, for a claim, the rest of
// its lease (or of its grace, once the lease ended), for a record its TTL.
//
// When the call fails, Redis may have run the script all the same (only its
// answer was lost, or it is still queued in a stalled Redis): the claim is
// released (see releaseLost), so that the retry the middleware's 503 invites
// finds the key free instead of waiting out the lease.
func (s *Store) claim(ctx context.Context, c redis.Scripter, direct bool, key string, claim []byte, req server.Request) (held []byte, left time.Duration, err error) {
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	res, err := call(cctx, direct, func(ctx context.Context) (any, error) {
		return claimScript.Run(ctx, c, []string{key}, claim, millis(req.LockTTL),
			millis(claimKeyTTL(req)), millis(grace(req.LockTTL))).Result()
	})
	cancel()
	if err != nil {
		s.refreshOnError(err)
		if mayHaveRun(err) {
			s.releaseLost(ctx, key, claim, sent.Add(req.LockTTL+grace(req.LockTTL)))
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
				return []byte(v), time.Duration(max(ms, 0)) * time.Millisecond, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("redisstore: claim: unexpected reply %T %v", res, res)
}

// releaseLost frees a claim whose claim call failed, in case Redis ran it:
// once now (bounded by the op timeout), and, unless that deleted it or found
// another owner, again in the background, with backoff, until one of those
// or until, when the claim's lease and grace are over, it no longer
// matters. A Redis that runs the claim later still (queued in a server
// stalled for longer) blocks the key for one lease and grace, no more.
func (s *Store) releaseLost(ctx context.Context, key string, claim []byte, until time.Time) {
	if done := s.releaseOnce(ctx, key, claim); done {
		return
	}
	go func() {
		delay := releaseRetryFirst
		for time.Now().Before(until) {
			time.Sleep(min(delay, time.Until(until))) // backoff between attempts
			if s.releaseOnce(ctx, key, claim) {
				return
			}
			delay = min(2*delay, releaseRetryCap)
		}
	}()
}

// mayHaveRun reports whether a failed call may have run in Redis all the
// same: its answer was lost (a timeout, a connection cut after the command was
// sent), rather than refused (an error reply from Redis: the script did not
// write; a connection that was never made).
func mayHaveRun(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// The background retries of releaseLost: the first after releaseRetryFirst,
// doubling up to releaseRetryCap.
const (
	releaseRetryFirst = 50 * time.Millisecond
	releaseRetryCap   = time.Second
)

// releaseOnce runs releaseScript once and reports whether nothing more is to
// be done: the claim was deleted now, or another owner holds the key.
func (s *Store) releaseOnce(ctx context.Context, key string, claim []byte) bool {
	n, err := s.releaseN(ctx, key, claim)
	return err == nil && (n == releaseDeleted || n == releaseOther)
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
	case e.unknown:
		return server.Result{Outcome: server.OutcomeUnknown}, nil
	case e.claim:
		return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: pttl}, nil
	}
	return server.Result{Outcome: server.OutcomeReplayed, Response: e.resp}, nil
}

// execute runs the handler under the claim, renewing its lease, and then
// records the response or releases the claim. The handler's context carries
// the claim's effect mark (server.BeginEffect calls mark).
func (s *Store) execute(ctx context.Context, key string, claim []byte, req server.Request, granted time.Time, run server.RunFunc) (server.Result, error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := s.startLease(key, claim, req, granted, cancel)

	returned := false
	defer func() {
		if !returned { // run panicked (or called runtime.Goexit): release, let it go on
			_ = l.stop()
			_ = s.release(ctx, key, claim)
		}
	}()
	resp, keep := run(server.ContextWithEffectMark(hctx, func(ctx context.Context) error {
		return s.mark(ctx, key, claim)
	}))
	returned = true

	leaseErr := l.stop()
	if !keep || resp == nil {
		// Not to be kept: free the key so a retry runs again. A failed
		// release is not reported: the claim expires within LockTTL.
		if err := s.release(ctx, key, claim); err != nil || leaseErr != nil {
			return server.Result{}, fmt.Errorf("redisstore: %w: %w", server.ErrNotRecorded, errors.Join(leaseErr, err))
		}
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	}
	// The handler's effect happened. Record it even if the lease was lost
	// while Redis was unreachable: finish succeeds while the key holds this
	// claim or nothing, and only fails when another owner took it.
	record := encodeRecord(req.Fingerprint, resp)
	err := s.record(ctx, key, claim, record, req.TTL)
	switch {
	case err == nil:
		// Recorded (if the lease had been lost, Redis was back before anyone
		// took the key).
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	case errors.Is(err, ErrLeaseLost):
		// Another owner holds the key: its record is the one that counts.
		return server.Result{}, fmt.Errorf("redisstore: %w: %w", server.ErrNotRecorded, errors.Join(leaseErr, err))
	case errors.Is(err, ErrNotReplicated):
		// Written to the master, not acknowledged by enough replicas in
		// time. The effect happened: answer it, and keep making the record
		// durable in the background.
		s.logWarn("record not acknowledged by the replicas in time; answering the handler's response and retrying in the background",
			key, err)
		go s.settle(ctx, key, claim, record, req.TTL)
		return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
	}
	// Redis failed: the claim stays (it is never released here), and the
	// store keeps trying to record the response in the background, so a
	// retry waits for it and replays it instead of running the handler again.
	go s.settle(ctx, key, claim, record, req.TTL)
	return server.Result{}, fmt.Errorf("redisstore: %w: %w", server.ErrNotRecorded, errors.Join(leaseErr, err))
}

// record writes the finished record over the caller's claim (or over nothing)
// and, with WithMinReplicas, WAITs for the replicas. It returns an error
// wrapping ErrLeaseLost when another value holds the key, ErrNotReplicated
// when the record was written but not acknowledged in time, or the Redis error.
func (s *Store) record(ctx context.Context, key string, claim, record []byte, ttl time.Duration) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.opTimeout+s.cfg.replicaTimeout)
	defer cancel()
	_, err := call(dctx, s.direct, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.recordOnce(ctx, key, claim, record, ttl)
	})
	s.refreshOnError(err)
	return err
}

func (s *Store) recordOnce(ctx context.Context, key string, claim, record []byte, ttl time.Duration) error {
	var c redis.Scripter = s.client
	if s.cfg.minReplicas > 0 {
		conn, err := s.conn(ctx, key)
		if err != nil {
			return fmt.Errorf("redisstore: recording the response: %w", err)
		}
		defer func() { _ = conn.Close() }()
		c = conn
	}
	n, err := finishScript.Run(ctx, c, []string{key}, claim, record, millis(ttl)).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: recording the response: %w", err)
	case n != 1:
		return fmt.Errorf("redisstore: %w: the claim expired and another owner holds the key", ErrLeaseLost)
	}
	if conn, ok := c.(*redis.Conn); ok {
		return s.waitReplicas(ctx, conn)
	}
	return nil
}

// mark marks the caller's claim as one whose effect may have begun
// (markScript) and, with WithMinReplicas, WAITs for the replicas as the claim
// does, so the mark is as durable as the claim. It is bounded by the op
// timeout (and the replicas' timeout) and by ctx, the handler's. An error
// means the mark may not stand: BeginEffect fails and the handler must not
// start its effect. A claim no longer the caller's wraps ErrLeaseLost.
func (s *Store) mark(ctx context.Context, key string, claim []byte) error {
	mctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout+s.cfg.replicaTimeout)
	defer cancel()
	_, err := call(mctx, s.direct, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.markOnce(ctx, key, claim)
	})
	s.refreshOnError(err)
	return err
}

func (s *Store) markOnce(ctx context.Context, key string, claim []byte) error {
	var c redis.Scripter = s.client
	if s.cfg.minReplicas > 0 {
		conn, err := s.conn(ctx, key)
		if err != nil {
			return fmt.Errorf("redisstore: marking the effect: %w", err)
		}
		defer func() { _ = conn.Close() }()
		c = conn
	}
	n, err := markScript.Run(ctx, c, []string{key}, claim).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: marking the effect: %w", err)
	case n != 1:
		return fmt.Errorf("redisstore: marking the effect: %w: the claim is no longer this request's", ErrLeaseLost)
	}
	if conn, ok := c.(*redis.Conn); ok {
		if err := s.waitReplicas(ctx, conn); err != nil {
			return fmt.Errorf("redisstore: marking the effect: %w", err)
		}
	}
	return nil
}

// settle keeps trying to record a response whose first attempt failed (Redis
// unreachable, or the replicas did not acknowledge it), with capped backoff.
// It runs in the background, after Do returned, and stops when the record is
// written (and acknowledged), when another owner holds the key, or:
//
//   - while the record is not written, when the record's TTL has passed (it
//     would have expired by then). It keeps trying every settleCap at most,
//     so that once Redis answers again the record lands within the grace a
//     claimant waits before it may take the key;
//   - once the record is written but not acknowledged by the replicas, after
//     settleReplicasFor (with backoff up to settleReplicasCap): the record is
//     on the master, so a retry replays it; only a failover before a replica
//     has it can lose it, and waiting longer does not make a missing replica
//     come back.
func (s *Store) settle(ctx context.Context, key string, claim, record []byte, ttl time.Duration) {
	if s.onSettled != nil {
		defer s.onSettled()
	}
	start := time.Now()
	giveUp := start.Add(ttl)
	written := false // the record is on the master; only WAIT failed
	delay, ceiling := 20*time.Millisecond, settleCap
	for attempt := 1; ; attempt++ {
		time.Sleep(delay) // backoff between attempts
		err := s.record(ctx, key, claim, record, ttl)
		switch {
		case err == nil:
			s.logInfo("response recorded in the background", key, "attempts", attempt)
			return
		case errors.Is(err, ErrLeaseLost):
			s.logWarn("giving up recording the response: another owner holds the key", key, err)
			return
		case errors.Is(err, ErrNotReplicated) && !written:
			written, ceiling = true, settleReplicasCap
			if until := time.Now().Add(s.cfg.settleReplicasFor); until.Before(giveUp) {
				giveUp = until
			}
		}
		if !time.Now().Before(giveUp) {
			if written {
				s.logWarn("giving up waiting for the replicas: the record is on the master only", key, err)
			} else {
				s.logWarn("giving up recording the response: its TTL has passed", key, err)
			}
			return
		}
		delay = min(2*delay, ceiling, time.Until(giveUp))
	}
}

// settleCap bounds the wait between two attempts of settle while the record
// is not written: once Redis is back, the owner's record lands within about
// this long.
const settleCap = 250 * time.Millisecond

// Once a record is on the master but not acknowledged by the replicas, settle
// WAITs again with backoff up to settleReplicasCap, for
// defaultSettleReplicasFor: about 15 attempts.
const (
	settleReplicasCap        = 5 * time.Second
	defaultSettleReplicasFor = time.Minute
)

// acquire claims key (claimScript) and, with WithMinReplicas, WAITs for the
// replicas to acknowledge the claim, releasing it and failing with
// ErrNotReplicated if they do not in time. held and pttl are as for claim.
func (s *Store) acquire(ctx context.Context, key string, claim []byte, req server.Request) (held []byte, pttl time.Duration, err error) {
	if s.cfg.minReplicas == 0 {
		return s.claim(ctx, s.client, s.direct, key, claim, req)
	}
	type claimed struct {
		held []byte
		pttl time.Duration
	}
	// One connection for the claim and its WAIT, used by one goroutine:
	// the whole exchange is one bounded call.
	wctx, cancel := context.WithTimeout(ctx, 2*s.cfg.opTimeout+s.cfg.replicaTimeout)
	defer cancel()
	got, err := call(wctx, s.direct, func(ctx context.Context) (claimed, error) {
		conn, err := s.conn(ctx, key)
		if err != nil {
			s.refreshOnError(err)
			return claimed{}, fmt.Errorf("redisstore: claim: %w", err)
		}
		defer func() { _ = conn.Close() }()
		held, pttl, err := s.claim(ctx, conn, true, key, claim, req)
		if err != nil || held != nil {
			return claimed{held, pttl}, err
		}
		if err := s.waitReplicas(ctx, conn); err != nil {
			s.refreshOnError(err)
			_ = s.release(ctx, key, claim)
			return claimed{}, fmt.Errorf("redisstore: claim: %w", err)
		}
		return claimed{}, nil
	})
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		// The exchange ran out of time in a client that ignores deadlines:
		// the claim may have landed.
		s.releaseLost(ctx, key, claim, time.Now().Add(req.LockTTL+grace(req.LockTTL)))
	}
	return got.held, got.pttl, err
}

// conn returns a connection to the master that holds key, so that a write and
// the WAIT after it go over one connection (WAIT counts the replication of
// that connection's writes). Close it after use.
func (s *Store) conn(ctx context.Context, key string) (*redis.Conn, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Conn(), nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return nil, fmt.Errorf("WithMinReplicas: unsupported client %T", s.client) // New refused it
}

// waitReplicas runs WAIT on conn: nil when at least minReplicas replicas have
// acknowledged conn's writes within replicaTimeout, else an error wrapping
// ErrNotReplicated (or the Redis error).
func (s *Store) waitReplicas(ctx context.Context, conn *redis.Conn) error {
	n, err := conn.Wait(ctx, s.cfg.minReplicas, s.cfg.replicaTimeout).Result()
	switch {
	case err != nil:
		return fmt.Errorf("WAIT: %w", err)
	case n < int64(s.cfg.minReplicas):
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.cfg.minReplicas, s.cfg.replicaTimeout)
	}
	return nil
}

func (s *Store) logWarn(msg, key string, err error) {
	if s.cfg.logger != nil {
		s.cfg.logger.Warn("redisstore: "+msg, "redis_key", truncate(key), "err", err)
	}
}

func (s *Store) logInfo(msg, key string, args ...any) {
	if s.cfg.logger != nil {
		s.cfg.logger.Info("redisstore: "+msg, append([]any{"redis_key", truncate(key)}, args...)...)
	}
}

// truncate bounds a Redis key in a log line (idempotency keys are up to 255
// characters; the prefix and scope hash add about 70).
func truncate(key string) string {
	const max = 160
	if len(key) > max {
		return key[:max] + "..."
	}
	return key
}

// release runs releaseScript with a context detached from the request. It
// returns an error wrapping ErrLeaseLost when another owner holds the key; a
// Redis error is not reported, since the claim then expires by itself within
// LockTTL.
func (s *Store) release(ctx context.Context, key string, claim []byte) error {
	n, err := s.releaseN(ctx, key, claim)
	if err == nil && n == releaseOther {
		return fmt.Errorf("%w: another owner holds the key", ErrLeaseLost)
	}
	return nil
}

// releaseN runs releaseScript, bounded by the op timeout, with a context
// detached from the request, and returns its answer.
func (s *Store) releaseN(ctx context.Context, key string, claim []byte) (int64, error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.opTimeout)
	defer cancel()
	n, err := call(dctx, s.direct, func(ctx context.Context) (int64, error) {
		return releaseScript.Run(ctx, s.client, []string{key}, claim).Int64()
	})
	s.refreshOnError(err)
	return n, err
}

// minGrace is the shortest grace (see grace).
const minGrace = time.Second

// grace is how long a claim whose lease ended must stay suspect, with Redis up,
// before another request may take the key: long enough for a live owner that
// was only cut off from Redis to get back in (its renewal retries every quarter
// renew interval, its background finish every settleCap). A third of lockTTL,
// and at least minGrace.
func grace(lockTTL time.Duration) time.Duration { return max(lockTTL/3, minGrace) }

// claimKeyTTL is how long the key of a claim lives in Redis: as long as the
// record would, and at least the lease plus its grace. The lease itself is
// inside the value, so an outage of Redis, however long, cannot expire a claim
// whose owner is about to record its response.
func claimKeyTTL(req server.Request) time.Duration {
	return max(req.TTL, req.LockTTL+grace(req.LockTTL))
}

// millis converts d to whole milliseconds for PX and PEXPIRE, rounding up so a
// positive duration never becomes 0.
func millis(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}
