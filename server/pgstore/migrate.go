package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Migrate creates the store's table and its expires_at index if they do not
// exist; it is idempotent and safe to run from several processes at once (they
// take turns on a transaction-scoped advisory lock), and while other instances
// serve requests: when the table and index exist it never waits for a lock
// that a claim in progress holds. In a table made by an earlier version it
// drops the CHECK constraint on state, which costs every record, if it can
// lock the table at once (no claim in progress); otherwise it leaves it, and
// the next Migrate tries again. The SQL is in docs/stores.md in the repository. Its
// statements use the simple protocol, so it works on any pool, PgBouncer
// included; it then refuses, with ErrStatementCacheBehindProxy, a pool whose
// query mode would fail there on the first request.
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, pgx.QueryExecModeSimpleProtocol, "idem-migrate:"+s.cfg.table); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.migrate, pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
		if err := s.dropStateCheck(ctx, tx); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.QueryExecModeSimpleProtocol, s.sql.index).Scan(&exists); err != nil || exists {
			return err
		}
		_, err := tx.Exec(ctx, s.sql.migrateIndex, pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if err == nil {
		err = s.checkPool(ctx)
	}
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.cfg.table, err)
	}
	return nil
}

// dropStateCheck drops, in tx, the CHECK constraint on state that versions
// before this one created, which PostgreSQL reparses at every INSERT of a
// record. ALTER TABLE needs the table's ACCESS EXCLUSIVE lock, which conflicts
// with the lock every claim in progress holds (its read): Migrate asks for it
// with NOWAIT, so that it neither waits for those claims nor makes new ones
// queue behind it, and leaves the constraint when the lock is not free at once.
func (s *Store) dropStateCheck(ctx context.Context, tx pgx.Tx) error {
	var name *string
	err := tx.QueryRow(ctx, `SELECT format('%I', conname) FROM pg_constraint
 WHERE conrelid = to_regclass($1) AND contype = 'c'
   AND pg_get_constraintdef(oid) = 'CHECK ((state = ANY (ARRAY[''claimed''::text, ''done''::text])))'`,
		pgx.QueryExecModeSimpleProtocol, s.sql.table).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = sp.Exec(ctx, "LOCK TABLE "+s.sql.table+" IN ACCESS EXCLUSIVE MODE NOWAIT; ALTER TABLE "+s.sql.table+" DROP CONSTRAINT "+*name, pgx.QueryExecModeSimpleProtocol)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: a claim is in progress
		return sp.Rollback(ctx)
	}
	if err != nil {
		return err
	}
	return sp.Commit(ctx)
}
