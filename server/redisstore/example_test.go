package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/redisstore"
)

// Protecting an endpoint with a Redis-backed store. The same code works with a
// Sentinel or Cluster configuration of redis.UniversalOptions. (Not run: it
// needs a Redis server.)
func Example() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	defer func() { _ = rdb.Close() }()
	store := redisstore.New(rdb, redisstore.WithPrefix("payments-idem:"), redisstore.WithOpTimeout(time.Second))

	api := &payments.API{Ledger: payments.NewMemLedger()}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(store, server.WithLockTTL(10*time.Second))(http.HandlerFunc(api.Create)))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}

// Through Sentinel, with every claim and record acknowledged by a replica
// before it counts, so that a failover loses neither; Check refuses a Redis
// whose eviction policy could delete records. (Not run: it needs Sentinel.)
func Example_sentinel() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		MasterName: "mymaster",
		Addrs:      []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"}, // the sentinels
	})
	defer func() { _ = rdb.Close() }()
	store := redisstore.New(rdb, redisstore.WithMinReplicas(1, time.Second))
	if err := store.Check(context.Background()); err != nil {
		log.Fatal(err) // for example: maxmemory-policy allkeys-lru
	}
	api := &payments.API{Ledger: payments.NewMemLedger()}
	_ = http.ListenAndServe("127.0.0.1:8080", server.Middleware(store)(http.HandlerFunc(api.Create)))
}

// New over a client whose server cannot be reached: the middleware fails
// closed, answering 503 with Retry-After, and the handler never runs
// unprotected. (Nothing listens on port 1.)
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()
	store := redisstore.New(rdb)

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
