package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
)

// InProgressRetryAfter is the RetryAfter Do reports with OutcomeInProgress when it
// cannot estimate the owner's remaining time: the owner has run longer than its
// Request.LockTTL, or its start is not visible to this database user (see
// inProgress).
const InProgressRetryAfter = time.Second

var (
	// errBadRecord: a stored row this package cannot read (edited by hand).
	errBadRecord = errors.New("pgstore: malformed record")
	// errBadRequest: a Request Do cannot honour.
	errBadRequest = errors.New("pgstore: invalid request")
)

// ErrPoolExhausted is wrapped by Do's error when no pooled connection became free
// within the acquire timeout (WithAcquireTimeout); the handler did not run.
var ErrPoolExhausted = errors.New("pgstore: no free connection in the pool")

// Store is a server.Store on PostgreSQL. The claim, the handler's business writes
// (made through Tx) and the recorded response commit in one transaction. It is
// safe for concurrent use by any number of goroutines and processes sharing the
// database.
type Store struct {
	pool  *pgxpool.Pool
	cfg   config
	sql   statements
	slots handlerSlots
	polls lookSlots
	usage usageCache       // the scopes' records, for WithScopeLimits
	now   func() time.Time // the usage counts' clock (tests)

	waiting atomic.Int64 // Do calls waiting for another request's key (tests)
}

var (
	_ server.Store  = (*Store)(nil)
	_ server.Pinger = (*Store)(nil)
)

// Ping implements server.Pinger: it reports whether the store can serve a Do
// now, by taking a pooled connection (waiting at most the acquire timeout, as
// Do would) and running an empty statement on it, bounded by ctx. A readiness
// check calls it (idem-server's /readyz).
func (s *Store) Ping(ctx context.Context) error {
	conn, err := s.acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: ping: %w", err)
	}
	defer conn.Release()
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("pgstore: ping: %w", err)
	}
	return nil
}

// New returns a Store that keeps its records in pool's database. It does not
// touch the database; call Migrate once to create the table. It panics if pool
// or an option is nil, or if WithReservedConns asks for the whole pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	if pool == nil {
		panic("pgstore: New(nil): want a *pgxpool.Pool")
	}
	cfg := config{table: DefaultTable, lockTimeout: DefaultLockTimeout, finishTimeout: DefaultFinishTimeout,
		acquireTimeout: DefaultAcquireTimeout, reserved: -1, idleInTx: DefaultIdleInTxTimeout,
		scopeMaxEntries: DefaultScopeMaxEntries, scopeMaxBytes: DefaultScopeMaxBytes}
	for _, o := range opts {
		if o == nil {
			panic("pgstore: New(nil Option): want an Option")
		}
		o(&cfg)
	}
	maxConns := int(pool.Config().MaxConns)
	if cfg.reserved < 0 {
		cfg.reserved = min(max(1, maxConns/8), maxConns-1)
	}
	if cfg.reserved >= maxConns {
		panic(fmt.Sprintf("pgstore: WithReservedConns(%d): want fewer than the pool's MaxConns (%d)", cfg.reserved, maxConns))
	}
	return &Store{pool: pool, cfg: cfg, sql: newStatements(cfg.table, cfg.idleInTx, cfg.statement), slots: newHandlerSlots(maxConns, cfg.reserved),
		polls: make(lookSlots, looksFor(maxConns, cfg.reserved)), now: time.Now}
}

// Table returns the name of the table the store uses, as given to WithTable.
func (s *Store) Table() string { return s.cfg.table }

// Do implements server.Store. It begins a transaction on a pooled connection and
// claims (req.Scope, req.Key): a transaction-scoped advisory lock on the key,
// taken if it is free, and a read of the key's record, both in the round trip
// of BEGIN; a live record is replayed (or is a mismatch) whoever holds the
// lock. If it holds the claim and no live record exists, it calls run with a
// context carrying the transaction (see Tx), then either inserts the record
// and commits (keep) or rolls back (not keep, or a panic), which also undoes
// the handler's business writes. A duplicate of a request still in progress
// waits for the key lock up to req.Wait (at most the lock timeout), only with
// a turn of server.WaitTurn (the process's bound on waiting duplicates), and then
// replays the response, runs if the first rolled back, or reports
// OutcomeInProgress. The record expires req.TTL after it is written.
//
// req.LockTTL does not bound the claim: the claim is a lock of an open
// transaction, which lives exactly as long as the owner's handler (or its
// connection). It only serves the RetryAfter estimate of OutcomeInProgress.
func (s *Store) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	if req.TTL < time.Microsecond {
		return server.Result{}, fmt.Errorf("%w: TTL %v", errBadRequest, req.TTL)
	}
	if req.Wait < 0 {
		return server.Result{}, fmt.Errorf("%w: Wait %v", errBadRequest, req.Wait)
	}
	owner := rand.Text()
	slot := false // whether this Do holds a handler slot
	defer func() {
		if slot {
			s.slots.release()
		}
	}()
	waitUntil := time.Now().Add(min(req.Wait, s.cfg.lockTimeout))
	poll := pollFirst
	var last server.Result   // the last in-progress answer
	var waitStart time.Time  // when a look first found the key busy
	var waited time.Duration // Result.Waited: from waitStart to the last look
	looking := false         // holds a place of s.polls
	defer func() {
		if looking {
			s.polls.release()
		}
	}()
	for looks := 0; ; looks++ {
		if looks > 0 { // a look again: the wait lasted until now
			waited = time.Since(waitStart)
		}
		res, needSlot, err := s.do(ctx, req, owner, run, &slot, &looking)
		res.Waited = waited
		if looking {
			s.polls.release()
			looking = false
		}
		if looks > 0 && errors.Is(err, ErrPoolExhausted) {
			// A look again found no connection: the owner was still running
			// at the last look, and that is the answer.
			last.Waited = waited
			return last, nil
		}
		if needSlot {
			// The key is free but every handler slot is taken: wait for one
			// without holding a connection, then claim again.
			if err := s.slots.wait(ctx, s.cfg.acquireTimeout); err != nil {
				return server.Result{}, fmt.Errorf("pgstore: %w", err)
			}
			slot = true
			looks = -1 // a claim, not a look again
			continue
		}
		if err != nil || res.Outcome != server.OutcomeInProgress {
			return res, err
		}
		// Another request holds the key: look again later, until it
		// records (replay), rolls back (claim and run), or the wait is over.
		// Between looks a waiter holds nothing: no connection, no lock, no
		// handler slot; a look takes a connection for two round trips, and
		// at most the pool's reserve of looks run at once.
		if slot {
			s.slots.release()
			slot = false
		}
		sleep := min(poll, time.Until(waitUntil))
		if sleep <= 0 {
			if !waitStart.IsZero() {
				res.Waited = time.Since(waitStart)
			}
			return res, nil
		}
		if waitStart.IsZero() {
			done, ok := server.WaitTurn(ctx)
			if !ok { // as many duplicates wait as the process allows: answer now
				return res, nil
			}
			defer done()
			waitStart = time.Now()
			s.waiting.Add(1)
			defer s.waiting.Add(-1)
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return server.Result{}, fmt.Errorf("pgstore: waiting for the key: %w", context.Cause(ctx))
		case <-t.C:
		}
		poll = min(2*poll, pollCap)
		last = res
		if !s.polls.wait(ctx, waitUntil) {
			if ctx.Err() != nil {
				return server.Result{}, fmt.Errorf("pgstore: waiting for the key: %w", context.Cause(ctx))
			}
			res.Waited = time.Since(waitStart)
			return res, nil
		}
		looking = true
	}
}

// do is one pass of Do on one connection: a claim and, if the key is busy, a
// probe of its owner. It returns needSlot, having rolled back and released
// the connection, when it claimed the key but holds no handler slot and none
// is free. A look again holds a place of s.polls (*looking); do gives it back
// before it runs the handler, which may take long.
func (s *Store) do(ctx context.Context, req server.Request, owner string, run server.RunFunc, slot, looking *bool) (res server.Result, needSlot bool, err error) {
	conn, err := s.acquire(ctx)
	if err != nil {
		return server.Result{}, false, err
	}
	// Release returns the connection to the pool if its transaction ended, and
	// closes it otherwise, which makes PostgreSQL roll the transaction back.
	defer conn.Release()
	for attempt := 0; ; attempt++ {
		tx, row, claim, err := s.claim(ctx, conn.Conn(), req, owner)
		if err != nil {
			s.rollback(ctx, tx) // no-op (ErrTxClosed) if BEGIN itself failed
			return server.Result{}, false, fmt.Errorf("pgstore: claim: %w", err)
		}
		switch claim {
		case claimFree, claimExpired:
			if err := s.admit(req); err != nil {
				s.rollback(ctx, tx)
				return server.Result{}, false, err
			}
			if !*slot && !s.slots.try() {
				s.rollback(ctx, tx)
				return server.Result{}, true, nil
			}
			*slot = true
			if *looking {
				s.polls.release()
				*looking = false
			}
			res, err := s.execute(ctx, conn.Conn(), tx, req, owner, claim == claimExpired, run)
			return res, false, err
		case claimStopped:
			s.rollback(ctx, tx) // read only; ends the transaction
			res, err := row.result(req.Fingerprint)
			return res, false, err
		case claimGone:
			s.rollback(ctx, tx)
			return row.gone(req.Fingerprint), false, nil
		}
		s.rollback(ctx, tx) // claimBusy
		pctx, cancel := context.WithTimeout(ctx, s.cfg.finishTimeout)
		res, free, err := s.inProgress(pctx, conn.Conn(), req)
		cancel()
		if free && attempt < maxClaims-1 {
			// No claim of this fingerprint, no record: the key's holder has
			// another fingerprint, or has just rolled back. Claim again.
			continue
		}
		return res, false, err
	}
}

// Looking again while a duplicate waits for the owner (Request.Wait): the
// first look after pollFirst, doubling up to pollCap.
const (
	pollFirst = 5 * time.Millisecond
	pollCap   = 50 * time.Millisecond
)

// maxClaims bounds the claims of one Do: after a first claim that finds the key
// busy, the claims that wait for it (req.Wait), repeated while the probe finds
// no claim of req's fingerprint and no record (see inProgress).
const maxClaims = 3

// What a claim found.
type claimResult int

const (
	claimFree    claimResult = iota // this transaction holds the key, which has no record
	claimExpired                    // this transaction holds the key, whose record has expired
	claimStopped                    // a live record stops the claim
	claimBusy                       // another transaction holds the key, and no live record is visible
	claimGone                       // this transaction holds the key, whose live effect mark's owner is gone
)

// acquire takes a connection from the pool, waiting at most the acquire timeout.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	actx, cancel := context.WithTimeoutCause(ctx, s.cfg.acquireTimeout, ErrPoolExhausted)
	defer cancel()
	conn, err := s.pool.Acquire(actx)
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(actx), ErrPoolExhausted) {
			err = fmt.Errorf("%w (%d in use, waited %v)", ErrPoolExhausted, s.pool.Stat().AcquiredConns(), s.cfg.acquireTimeout)
		}
		return nil, fmt.Errorf("pgstore: acquire: %w", err)
	}
	return conn, nil
}

// claim begins a transaction on conn and claims (req.Scope, req.Key) or reads
// the record that stops the claim, in one round trip: BEGIN (pgx's
// Batch.BeginTx), tryLock and read, pipelined. The
// transaction comes back whatever the error, for the caller to roll back; it is
// closed already if BEGIN failed.
func (s *Store) claim(ctx context.Context, conn *pgx.Conn, req server.Request, owner string) (pgx.Tx, record, claimResult, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(s.sql.tryLock, s.keyLock(req), s.claimMark(req), owner)
	b.Queue(s.sql.read, req.Scope, req.Key)
	count := s.countDue(req.Scope)
	if count {
		b.Queue(s.sql.usage, req.Scope)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.finishTimeout)
	defer cancel()
	br := conn.SendBatch(cctx, b)
	tx := br.Tx()
	r, c, err := claimResults(br, s.sql.tryLockCols)
	if err == nil && count {
		u := scopeUsage{at: s.now()}
		if err = br.QueryRow().Scan(&u.entries, &u.bytes); err == nil {
			s.usage.Set(req.Scope, u)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tx, r, c, err
}

// claimResults reads the results of claim's pipeline, BEGIN's first.
func claimResults(br pgx.BatchResults, tryLockCols int) (record, claimResult, error) {
	if _, err := br.Exec(); err != nil {
		return record{}, claimBusy, fmt.Errorf("begin: %w", err)
	}
	var locked bool
	dest := make([]any, tryLockCols) // the settings' columns are skipped (nil)
	dest[0] = &locked
	if err := br.QueryRow().Scan(dest...); err != nil {
		return record{}, claimBusy, err
	}
	var r record
	var live bool
	err := br.QueryRow().Scan(&live, &r.fingerprint, &r.owner, &r.state, &r.status, &r.headerNames, &r.headerValues, &r.body)
	expired := err == nil && !live
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return record{}, claimBusy, err
	case live && r.marked() && locked:
		// The mark's owner began its effect and its transaction has ended
		// without the record: its process crashed, or its session ended.
		return r, claimGone, nil
	case live && r.marked():
		return record{}, claimBusy, nil // its owner runs: a duplicate
	case live:
		return r, claimStopped, nil
	}
	switch {
	case !locked:
		return record{}, claimBusy, nil
	case expired:
		return record{}, claimExpired, nil
	}
	return record{}, claimFree, nil
}

// execute calls run inside the claim's transaction and ends the transaction;
// takeover says that the key's expired record is to be overwritten. run's
// context carries the transaction (Tx) and the effect mark
// (server.ContextWithEffectMark): a handler that calls server.BeginEffect
// has the mark committed (mark) before it starts its effect, and the record
// then replaces it, or a release clears it.
func (s *Store) execute(ctx context.Context, conn *pgx.Conn, tx pgx.Tx, req server.Request, owner string, takeover bool, run server.RunFunc) (server.Result, error) {
	finished := false
	defer func() {
		if !finished { // run panicked: undo the claim and the business writes (a mark stays)
			s.rollback(ctx, tx)
		}
	}()
	var marked atomic.Bool
	hctx := server.ContextWithEffectMark(ContextWithTx(ctx, sharedTx{tx}), func(mctx context.Context) error {
		if err := s.mark(mctx, req, owner); err != nil {
			return err
		}
		marked.Store(true)
		return nil
	})
	resp, keep := run(hctx)
	finished = true

	res := server.Result{Outcome: server.OutcomeExecuted, Response: resp}
	if !keep || resp == nil {
		var err error
		if marked.Load() {
			// While the transaction holds the key, no one can see the
			// mark without its owner; a crash between the two leaves the
			// key outcome-unknown, the cautious side.
			if err = s.unmark(ctx, req, owner); err != nil {
				err = fmt.Errorf("pgstore: %w: clearing the effect mark: %w", server.ErrNotRecorded, err)
			}
		}
		s.rollback(ctx, tx)
		return res, err
	}
	if err := s.recordAndCommit(ctx, conn, req, owner, takeover, marked.Load(), resp); err != nil {
		s.rollback(ctx, tx) // no-op if the server already rolled back
		return res, fmt.Errorf("pgstore: %w: %w", server.ErrNotRecorded, err)
	}
	if s.bounded(req.Scope) {
		addUsage(&s.usage, req.Scope, charge(req, owner, resp))
	}
	return res, nil
}

// mark commits the durable effect mark of the claim of req that owner holds,
// on a pooled connection of its own, bounded by ctx (the handler's), the
// acquire timeout and the finish timeout. It fails when the claim's
// transaction no longer holds the key (its session ended: the handler must
// not start its effect) or a live row is in the way.
func (s *Store) mark(ctx context.Context, req server.Request, owner string) error {
	conn, err := s.acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: effect mark: %w", err)
	}
	defer conn.Release()
	mctx, cancel := context.WithTimeout(ctx, s.cfg.finishTimeout)
	defer cancel()
	var held bool
	var written int64
	if err := conn.QueryRow(mctx, s.sql.mark, req.Scope, req.Key, req.Fingerprint, owner, req.TTL.Microseconds(), s.keyLock(req)).Scan(&held, &written); err != nil {
		return fmt.Errorf("pgstore: effect mark: %w", err)
	}
	switch {
	case !held:
		return errors.New("pgstore: effect mark: the claim's transaction has ended (no one holds the key's lock)")
	case written != 1:
		return errors.New("pgstore: effect mark: a live row of the key is in the way")
	}
	return nil
}

// unmark deletes the effect mark owner made for req, on a pooled connection
// of its own, on a context detached from the request and bounded by the
// finish timeout.
func (s *Store) unmark(ctx context.Context, req server.Request, owner string) error {
	fctx, cancel := s.finishContext(ctx)
	defer cancel()
	conn, err := s.acquire(fctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Exec(fctx, s.sql.unmark, req.Scope, req.Key, owner)
	return err
}

// recordAndCommit writes the record of resp and commits, in one round trip: the
// INSERT (takeOver over an expired record, overMark over the claim's effect
// mark) and the COMMIT are pipelined, and
// PostgreSQL skips the COMMIT if the INSERT fails. It runs on a context
// detached from the request. After it succeeds the transaction has ended and tx
// must not be used.
func (s *Store) recordAndCommit(ctx context.Context, conn *pgx.Conn, req server.Request, owner string, takeover, marked bool, resp *server.Response) error {
	fctx, cancel := s.finishContext(ctx)
	defer cancel()
	names, values := encodeHeader(resp.Header)
	b := &pgx.Batch{}
	write := s.sql.insert
	switch {
	case marked:
		write = s.sql.overMark
	case takeover:
		write = s.sql.takeOver
	}
	b.Queue(write, req.Scope, req.Key, req.Fingerprint, owner, resp.Status, names, values, resp.Body, req.TTL)
	b.Queue("COMMIT")
	br := conn.SendBatch(fctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		if notClaims(err) {
			return fmt.Errorf("record: not the claim's transaction (the handler ended it; the owner token %s is not set in this one): %w", owner, err)
		}
		return fmt.Errorf("record: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if tag.String() != "COMMIT" { // COMMIT of a failed transaction answers ROLLBACK
		return fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		return fmt.Errorf("commit: transaction status %q after COMMIT", st)
	}
	return nil
}

// notClaims reports whether err is the record's refusal of a transaction
// that is not the claim's: the owner check of insert, takeOver and overMark
// gives owner_token NULL there, which its NOT NULL constraint refuses.
func notClaims(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23502" && pgErr.ColumnName == "owner_token"
}

// finishContext is the context of the statements Do runs once the handler
// has returned (record, COMMIT, ROLLBACK, clearing a mark): detached from the
// request, so that a client that leaves still ends the transaction, and
// bounded by the finish timeout and by what is left of ctx's deadline (the
// request's: server.LimitRequestTime), so that a PostgreSQL that does not
// answer still lets the request be answered within it. A transaction whose
// ROLLBACK cannot be sent in time dies with its connection, which pgx then
// closes.
func (s *Store) finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(s.cfg.finishTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

// rollback ends tx on a context detached from the request. Its error is dropped:
// a transaction that cannot be rolled back dies with its connection, which pgx
// then closes, and PostgreSQL rolls it back.
func (s *Store) rollback(ctx context.Context, tx pgx.Tx) {
	fctx, cancel := s.finishContext(ctx)
	defer cancel()
	_ = tx.Rollback(fctx)
}
