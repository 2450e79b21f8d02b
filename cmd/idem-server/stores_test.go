package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
)

// The durable-store tests need the real servers. They skip, saying how to run
// them, when the servers are down, unless IDEM_REQUIRE_SERVICES=1 (CI), where
// an unreachable server fails the test.

func postgresURL(t *testing.T) string {
	t.Helper()
	url := servicetest.PostgresURL()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
		pool.Close()
	}
	if err != nil {
		unavailable(t, "PostgreSQL", url, "IDEM_POSTGRES_URL", err)
	}
	return url
}

func redisAddr(t *testing.T) string {
	t.Helper()
	addr := servicetest.RedisAddr()
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		unavailable(t, "Redis", addr, "IDEM_REDIS_ADDR", err)
	}
	_ = conn.Close()
	return addr
}

// binaryStores are the stores a test runs idem-server on, each with the flags
// that select it: memory, the shared Redis, and PostgreSQL on a schema of the
// test's own (Redis's keys are the test's by its keys).
var binaryStores = []struct {
	name string
	args func(t *testing.T) []string
}{
	{"memory", func(*testing.T) []string { return nil }},
	{"redis", func(t *testing.T) []string { return []string{"-store", "redis", "-redis-addr", redisAddr(t)} }},
	{"postgres", func(t *testing.T) []string {
		url, _ := demoSchema(t)
		return []string{"-store", "postgres", "-postgres-url", url}
	}},
}

func unavailable(t *testing.T, what, where, env string, err error) {
	t.Helper()
	servicetest.Unreachable(t, "%s not reachable at %s (%v): start it, or set %s", what, where, err, env)
}

func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// paymentsCount asks the server's GET /payments how many payments customer has.
func paymentsCount(t *testing.T, base, customer string) string {
	t.Helper()
	_, b := doRequest(t, http.MethodGet, base+"/payments?customer="+customer, "", "", nil)
	s := string(b)
	i := strings.Index(s, `"count":`)
	if i < 0 {
		t.Fatalf("GET /payments: %s", s)
	}
	rest := s[i+len(`"count":`):]
	return rest[:strings.IndexAny(rest, ",}")]
}

// TestRunDurableStores: each durable store serves the contract end to end
// through the real binary's wiring: execute, replay byte for byte, count one.
func TestRunDurableStores(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"postgres", func(t *testing.T) []string { return []string{"-store", "postgres", "-postgres-url", postgresURL(t)} }},
		{"redis", func(t *testing.T) []string { return []string{"-store", "redis", "-redis-addr", redisAddr(t)} }},
		{"redis+postgres ledger", func(t *testing.T) []string {
			return []string{"-store", "redis", "-redis-addr", redisAddr(t), "-ledger-postgres-url", postgresURL(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, stop, _ := startRun(t, tc.args(t)...)
			customer, key := unique("cus"), unique("key")
			body := `{"customer":"` + customer + `","amount":700,"currency":"EUR"}`
			first, fb := doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
			replay, rb := doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
			if first.StatusCode != http.StatusCreated || replay.StatusCode != http.StatusCreated ||
				replay.Header.Get(server.HeaderReplayed) != "true" || string(fb) != string(rb) {
				t.Fatalf("first %d %s; replay %d %v %s", first.StatusCode, fb, replay.StatusCode, replay.Header, rb)
			}
			other, _ := doRequest(t, http.MethodPost, url+"/payments", key, strings.Replace(body, "700", "701", 1), nil)
			if other.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("same key, other body: %d, want 422", other.StatusCode)
			}
			if n := paymentsCount(t, url, customer); n != "1" {
				t.Errorf("payments = %s, want 1", n)
			}
			if err := stop(); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
}

// TestBinaryCrashPostgres kills the server process in the middle of a keyed
// request, restarts it and retries the key: on PostgreSQL the claim, the
// payment and the stored response share one transaction, so the dead process
// left neither, and the retry charges exactly once.
func TestBinaryCrashPostgres(t *testing.T) {
	t.Parallel()
	pgURL := postgresURL(t)
	for _, tc := range []struct {
		name  string
		fault http.Header
		kill  func(t *testing.T, p *process, app string)
	}{
		{
			// The process exits on its own right after the business write,
			// before the response is recorded.
			name:  "exit after the business write",
			fault: http.Header{"Chaos-Crash": {"after-write"}},
			kill:  func(*testing.T, *process, string) {},
		},
		{
			// SIGKILL while the handler sleeps inside its transaction.
			name:  "SIGKILL mid-handler",
			fault: http.Header{"Chaos-Delay": {"30s"}},
			kill: func(t *testing.T, p *process, app string) {
				waitInTransaction(t, pgURL, app, 1)
				if err := p.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := unique("idemcrash")
			url := withAppName(pgURL, app)
			p := startBinary(t, "-store", "postgres", "-postgres-url", url, "-chaos")
			customer, key := unique("cus"), unique("key")
			body := `{"customer":"` + customer + `","amount":900,"currency":"EUR"}`

			sent := make(chan error, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(body))
				req.Header.Set(server.HeaderKey, key)
				for k, v := range tc.fault {
					req.Header[k] = v
				}
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
					err = fmt.Errorf("the doomed request was answered %d", resp.StatusCode)
				} else {
					err = nil
				}
				sent <- err
			}()
			tc.kill(t, p, app)
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()

			// Restarted, the same key runs again (nothing was recorded) and
			// charges once in all.
			p2 := startBinary(t, "-store", "postgres", "-postgres-url", pgURL, "-chaos")
			resp, b := doRequest(t, http.MethodPost, p2.url+"/payments", key, body, nil)
			if resp.StatusCode != http.StatusCreated || resp.Header.Get(server.HeaderReplayed) != "" {
				t.Fatalf("retry after the crash: %d %v %s, want a first execution", resp.StatusCode, resp.Header, b)
			}
			if n := paymentsCount(t, p2.url, customer); n != "1" {
				t.Errorf("payments after crash and retry = %s, want exactly 1", n)
			}
		})
	}
}

func withAppName(url, app string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "application_name=" + app
}
