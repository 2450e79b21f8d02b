package redisstore_test

import (
	"net/http"
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
