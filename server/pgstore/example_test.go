package pgstore_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/demo/payments"
	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// The payments API protected by a PostgreSQL store: each payment and its
// stored response commit in one transaction. (Not run: it needs a database.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.WithTable("idem_keys"))
	if err != nil {
		log.Fatal(err)
	}
	ledger, err := pgpayments.New(pool, "payments")
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if err := ledger.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	stop := store.StartReaper(ctx, pgstore.Reaper{})
	defer stop()

	api := &payments.API{Ledger: ledger}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
	mux.HandleFunc("GET /payments", api.List)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
