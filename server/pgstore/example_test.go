package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// A payments endpoint protected by a PostgreSQL store. The handler writes its
// payment through pgstore.Tx, the store's transaction, so the payment and the
// recorded response commit together: a retry after a crash either replays the
// response or finds no payment and runs again. (Not run: it needs a database.)
func Example() {
	ctx := context.Background()
	pool, err := pgstore.NewPool(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := pgstore.New(pool, pgstore.WithTable("idem_keys"))
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	// The application's own table, created as it creates all of its tables.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS payments (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer text NOT NULL,
    amount   bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	stop := store.StartReaper(ctx, pgstore.Reaper{})
	defer stop()

	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(createPayment)))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// createPayment is the business handler: it writes through the store's
// transaction and never commits or rolls back itself. Any 5xx it answers makes
// the store roll the payment back with the key.
func createPayment(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Customer string `json:"customer"`
		Amount   int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		http.Error(w, "want {\"customer\": \"...\", \"amount\": N > 0}", http.StatusUnprocessableEntity)
		return
	}
	tx := pgstore.Tx(r.Context()) // set: the middleware runs a POST only with a key, through Do
	var id int64
	err := tx.QueryRow(r.Context(), "INSERT INTO payments (customer, amount) VALUES ($1, $2) RETURNING id",
		in.Customer, in.Amount).Scan(&id)
	if err != nil {
		http.Error(w, "payment not taken", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]int64{"id": id})
}

// New over a pool whose server cannot be reached: the middleware fails closed,
// answering 503 with Retry-After, and the handler never runs unprotected.
// (The pool is built without connecting; nothing listens on port 1.)
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=1")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := pgstore.New(pool)

	runs := 0
	h := server.Middleware(store)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1000}`))
	req.Header.Set(server.HeaderKey, "order-7")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Retry-After") != "", "runs:", runs)
	// Output:
	// 503 true runs: 0
}
