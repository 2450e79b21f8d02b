package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// ErrSharedTx is returned by Commit on the transaction Tx hands to a handler: the
// store commits it, together with the idempotency record, after the handler.
var ErrSharedTx = errors.New("pgstore: the store commits this transaction after the handler; use tx.Begin for a savepoint")

type txKey struct{}

// Tx returns the transaction that holds the claim of the request ctx belongs to,
// or nil outside a handler run by Store.Do. A handler writes through it so that
// its business write commits, or rolls back, with the stored response.
//
// The handler must not end the transaction: Commit returns ErrSharedTx and changes
// nothing; Rollback does roll back, after which the store cannot record the
// response and Do fails with server.ErrNotRecorded; nothing was committed, so a
// retry runs the handler again, correctly. For a partial rollback use tx.Begin, which
// opens a savepoint.
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// ContextWithTx returns a copy of ctx whose Tx is tx. Do uses it for the handler;
// code that runs a handler without the store (a baseline, a test, a job that is
// not idempotent by key) can use it to give the handler its own transaction.
func ContextWithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// sharedTx is the handler's view of the store's transaction.
type sharedTx struct{ pgx.Tx }

// Commit refuses: the store commits after recording the response.
func (sharedTx) Commit(context.Context) error { return ErrSharedTx }
