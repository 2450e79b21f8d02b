package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/server"
)

// keyLock is the advisory lock key of the claim, which its owner holds while
// it runs: 64 bits of SHA-256 over the length-prefixed table, scope and key.
func (s *Store) keyLock(req server.Request) int64 {
	return lockKey("idem-key", s.cfg.table, req.Scope, req.Key)
}

// claimMark is the advisory lock key the owner of a claim also holds while it
// runs, by which a duplicate tells its fingerprint: 64 bits of SHA-256 over the
// length-prefixed table, scope, key and fingerprint.
func (s *Store) claimMark(req server.Request) int64 {
	return lockKey("idem-claim", s.cfg.table, req.Scope, req.Key, req.Fingerprint)
}

// lockKey is 64 bits of SHA-256 over the length-prefixed parts. The bytes
// are gathered in a buffer on the stack (on the heap past 256 bytes) and
// hashed at once, which allocates nothing for the usual sizes: a claim
// computes two keys.
func lockKey(parts ...string) int64 {
	var buf [256]byte
	b := buf[:0]
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	sum := sha256.Sum256(b)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// inProgress answers a duplicate whose claim timed out on the key lock of a
// request in progress (whose fingerprint is invisible: it has written no row).
// The owner holds an advisory lock on claimMark of its own request: if that of
// req is held, the request in progress is this one (OutcomeInProgress);
// otherwise it is another one (OutcomeMismatch), unless the owner has finished in
// the meantime, in which case its committed record answers. free reports the
// case where no claim of req's fingerprint is held and no record is live:
// another fingerprint's claim (a mismatch), or no claim at all (the owner has
// just rolled back); Do then claims once more and, if that times out the same
// way, answers OutcomeMismatch.
//
// RetryAfter estimates the owner's remaining time as req.LockTTL less how long
// the owner has been running (its transaction began with the claim); when the
// owner has run longer than that, or its start is not visible, it is
// InProgressRetryAfter.
func (s *Store) inProgress(ctx context.Context, conn *pgx.Conn, req server.Request) (res server.Result, free bool, err error) {
	b := &pgx.Batch{}
	b.Queue(s.sql.probeOwner, s.claimMark(req))
	b.Queue(s.sql.readLive, req.Scope, req.Key)
	br := conn.SendBatch(ctx, b) // two statements, two snapshots: the probe first
	defer br.Close()
	var running *float64
	if err := br.QueryRow().Scan(&free, &running); err != nil {
		return server.Result{}, false, fmt.Errorf("pgstore: probe: %w", err)
	}
	var r record
	err = br.QueryRow().Scan(&r.fingerprint, &r.owner, &r.state, &r.status, &r.headerNames, &r.headerValues, &r.body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if free {
			return server.Result{Outcome: server.OutcomeMismatch}, true, nil
		}
		return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: remaining(req.LockTTL, running)}, false, nil
	case err != nil:
		return server.Result{}, false, fmt.Errorf("pgstore: read: %w", err)
	case r.marked() && r.fingerprint == req.Fingerprint:
		// The owner began its effect: in progress while it runs (the
		// next claim tells whether it has gone).
		return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: remaining(req.LockTTL, running)}, false, nil
	}
	res, err = r.result(req.Fingerprint)
	return res, false, err
}

// remaining is the RetryAfter of an owner that has been running for running
// seconds (nil: unknown) under a lease of lockTTL.
func remaining(lockTTL time.Duration, running *float64) time.Duration {
	if running == nil {
		return InProgressRetryAfter
	}
	left := lockTTL - time.Duration(*running*float64(time.Second))
	if left < InProgressRetryAfter {
		return InProgressRetryAfter
	}
	return left
}
