package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Migrate creates the store's table and its expires_at index if they do not
// exist; it is idempotent and safe to run from several processes at once (they
// take turns on a transaction-scoped advisory lock), and while other instances
// serve requests: when the table and index exist it takes no lock that a claim
// in progress holds. The SQL is in docs/stores.md in the repository. Its
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
