package main

import (
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem/server"
)

// TestRunThroughPgBouncer (issue 10): -postgres-url pointing at PgBouncer in
// transaction pooling mode, as a user writes it (no query mode in the URL).
// Before, migrate failed with 42P05 and requests with 26000. Two servers start
// on it, one after the other and then side by side (a restart beside a running
// instance), and serve concurrent keyed requests: executions, replays from
// either, one payment per key.
func TestRunThroughPgBouncer(t *testing.T) {
	t.Parallel()
	args := []string{"-store", "postgres", "-postgres-url", pgbouncerURL(t)}
	first, stopFirst, _ := startRun(t, args...)
	customer := unique("cus")
	body := `{"customer":"` + customer + `","amount":700,"currency":"EUR"}`
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = unique("key")
	}
	post := func(url string) {
		var wg sync.WaitGroup
		for _, key := range keys {
			wg.Go(func() {
				resp, b := doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
				if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
					t.Errorf("POST %s: %d %s", key, resp.StatusCode, b)
				}
			})
		}
		wg.Wait()
	}
	post(first)
	if err := stopFirst(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	second, _, _ := startRun(t, args...)
	third, _, _ := startRun(t, args...)
	post(second)
	post(third)
	for _, key := range keys {
		resp, b := doRequest(t, http.MethodPost, third+"/payments", key, body, nil)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get(server.HeaderReplayed) != "true" {
			t.Fatalf("replay of %s after the restart: %d %v %s", key, resp.StatusCode, resp.Header, b)
		}
	}
	if n := paymentsCount(t, second, customer); n != "20" {
		t.Fatalf("payments = %s, want 20 (one per key)", n)
	}
}
