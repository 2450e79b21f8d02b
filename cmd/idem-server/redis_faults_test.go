package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// Regression (issue 12.2): idem-server refuses to start on a Redis whose
// maxmemory-policy can evict records, saying why and how to opt in; with
// -redis-allow-eviction it starts.
func TestRedisEvictionPolicyRefused(t *testing.T) {
	t.Parallel()
	addr := startPrivateRedis(t, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru").addr
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-store", "redis", "-redis-addr", addr}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "maxmemory-policy allkeys-lru") ||
		!strings.Contains(err.Error(), "-redis-allow-eviction") || exitCode(err, io.Discard) != 1 {
		t.Fatalf("run = %v, want a start-up error naming the policy and -redis-allow-eviction", err)
	}
	url, stop, _ := startRun(t, "-store", "redis", "-redis-addr", addr, "-redis-allow-eviction")
	if resp, b := doRequest(t, http.MethodPost, url+"/payments", unique("key"), `{"customer":"c","amount":1,"currency":"EUR"}`, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("with -redis-allow-eviction: %d %s", resp.StatusCode, b)
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// Regression (issue 10): a 503 caused by the store logs the store's error on
// the request's line; before, the log said 503 and nothing about why.
func TestStoreErrorIsLogged(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	url, _, logs := startRun(t, "-store", "redis", "-redis-addr", srv.addr)
	srv.kill()
	resp, b := doRequest(t, http.MethodPost, url+"/payments", unique("key"), `{"customer":"c","amount":1,"currency":"EUR"}`, nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with Redis down: %d %s, want 503", resp.StatusCode, b)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"status":503`) {
			line = l
		}
	}
	// The cause is "connection refused", or a time-out when the dials take
	// longer than the store's per-call bound on a loaded machine.
	if !strings.Contains(line, `"level":"WARN"`) || !strings.Contains(line, `"store_error":"redisstore: claim:`) ||
		!strings.Contains(line, "connection refused") && !strings.Contains(line, "deadline exceeded") {
		t.Fatalf("the 503's log line %q does not carry the store's error", line)
	}
}

// Regression (issue 12.1), end to end: Redis is killed while a payment's
// answer is delayed after its business write, and restarted with its data
// after the claim's lease (-lock-ttl 1s) has run out. The request cannot be
// recorded; the retry with the same key gets the first payment's response
// replayed, and there is one payment. Before, the claim expired and the retry
// charged again.
func TestRedisKilledAfterThePaymentChargesOnce(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	url, _, logs := startRun(t, "-store", "redis", "-redis-addr", srv.addr, "-lock-ttl", "1s", "-chaos")
	customer, key := unique("cus"), unique("key")
	body := `{"customer":"` + customer + `","amount":4200,"currency":"EUR"}`

	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
		req.Header.Set(server.HeaderKey, key)
		req.Header.Set(chaos.HeaderDelayAfterWrite, "1500ms")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		first <- resp.StatusCode
	}()
	waitPayments(t, url, customer, "1") // the business write happened
	srv.kill()
	if code := <-first; code < 500 {
		t.Fatalf("the first request, unrecorded, answered %d", code)
	}
	time.Sleep(time.Second) // the outage outlasts the lease: the passing of time is what is tested
	srv.start()

	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, b := doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
		if resp.StatusCode == http.StatusCreated {
			if resp.Header.Get(server.HeaderReplayed) != "true" {
				t.Fatalf("the retry ran the payment again: %s; log:\n%s", b, logs)
			}
			break
		}
		if resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s; log:\n%s", resp.StatusCode, b, logs)
		}
		time.Sleep(100 * time.Millisecond) // the client's backoff after a 409 or 503
	}
	if n := paymentsCount(t, url, customer); n != "1" {
		t.Fatalf("payments = %s, want exactly 1", n)
	}
}

// waitPayments waits (bounded) until customer has want payments: the server's
// state, seen through GET /payments.
func waitPayments(t *testing.T, url, customer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for paymentsCount(t, url, customer) != want {
		if time.Now().After(deadline) {
			t.Fatalf("customer %s never had %s payments", customer, want)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's state
	}
}
