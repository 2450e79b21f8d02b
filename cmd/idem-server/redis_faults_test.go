package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Regression (issue 12.2): idem-server refuses to start on a Redis whose
// maxmemory-policy can evict records, saying why and how to opt in; with
// -redis-allow-eviction it starts.
func TestRedisEvictionPolicyRefused(t *testing.T) {
	t.Parallel()
	addr, _ := startPrivateRedis(t, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru")
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
	addr, kill := startPrivateRedis(t)
	url, _, logs := startRun(t, "-store", "redis", "-redis-addr", addr)
	kill()
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
