package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
)

// TestRunSlowHandlersDoNotStarveThePool (issue 12, 7): the default pool has 4
// connections (max(4, NumCPU) on this machine's sizes) and a keyed request holds
// one for its handler's whole duration. Four slow keyed requests used to take
// all four, and every replay, duplicate, GET /payments and unprotected POST
// waited for them. Now handlers take at most three (one connection is
// reserved): the fourth slow request gets 503 with Retry-After within the
// acquire timeout, and the others are answered while the three still run.
func TestRunSlowHandlersDoNotStarveThePool(t *testing.T) {
	t.Parallel()
	pgURL := postgresURL(t)
	if n := maxConnsOf(t, pgURL); n != 4 {
		t.Skipf("the default pool here has %d connections; the test is written for 4", n)
	}
	app := unique("idempool")
	url, _, _ := startRun(t, "-store", "postgres", "-postgres-url", withAppName(pgURL, app), "-chaos")
	customer := unique("cus")
	body := `{"customer":"` + customer + `","amount":300,"currency":"EUR"}`

	done := unique("key")
	if resp, b := doRequest(t, http.MethodPost, url+"/payments", done, body, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first of %s: %d %s", done, resp.StatusCode, b)
	}

	type answer struct {
		status     int
		retryAfter string
	}
	slow := make(chan answer, 4)
	slowKey := unique("slow")
	for i := range 4 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
			req.Header.Set(server.HeaderKey, slowKey+string(rune('a'+i)))
			// Slow enough that the checks below, each of which must be
			// answered while these still run, fit in it on a loaded CI
			// machine (8s was not always enough with the other tests).
			req.Header.Set("Chaos-Delay-After-Write", "20s")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("slow request: %v", err)
				slow <- answer{}
				return
			}
			resp.Body.Close()
			slow <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	// One of the four finds no handler slot and is refused, before any of the
	// other three has finished.
	if a := <-slow; a.status != http.StatusServiceUnavailable || a.retryAfter == "" {
		t.Fatalf("first answer among four slow requests: %d, Retry-After %q; want 503 with Retry-After", a.status, a.retryAfter)
	}
	waitInTransaction(t, pgURL, app, 3)

	stillRunning := func(what string) {
		t.Helper()
		select {
		case a := <-slow:
			t.Fatalf("%s was answered only after a slow handler finished (%d)", what, a.status)
		default:
		}
	}
	if resp, b := doRequest(t, http.MethodPost, url+"/payments", done, body, nil); resp.StatusCode != http.StatusCreated || resp.Header.Get(server.HeaderReplayed) != "true" {
		t.Fatalf("replay beside slow handlers: %d %s", resp.StatusCode, b)
	}
	stillRunning("the replay")
	if resp, b := doRequest(t, http.MethodPost, url+"/payments", slowKey+"a", body, http.Header{"Prefer": {"wait=0"}}); resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("duplicate of a slow request: %d %s; want 409 (or 503 if it was the refused one)", resp.StatusCode, b)
	}
	stillRunning("the duplicate")
	if resp, b := doRequest(t, http.MethodGet, url+"/payments?customer="+customer, "", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /payments beside slow handlers: %d %s", resp.StatusCode, b)
	}
	stillRunning("GET /payments")
	if resp, b := doRequest(t, http.MethodPost, url+"/payments/unprotected", "", body, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("unprotected POST beside slow handlers: %d %s", resp.StatusCode, b)
	}
	stillRunning("the unprotected POST")
	for range 3 {
		if a := <-slow; a.status != http.StatusCreated {
			t.Errorf("slow request answered %d, want 201", a.status)
		}
	}
}

// maxConnsOf is the MaxConns pgxpool gives url by default.
func maxConnsOf(t *testing.T, url string) int32 {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.MaxConns
}

// waitInTransaction waits until n backends named app hold an open
// transaction. There is no channel across the database, so it polls, bounded by
// a deadline.
func waitInTransaction(t *testing.T, pgURL, app string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var got int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&got)
		if err == nil && got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d handlers in a transaction (last error %v)", got, n, err)
		case <-tick.C:
		}
	}
}
