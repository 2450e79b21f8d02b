package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
)

// TestBinarySIGTERMMidHandler (issue 12, 3): SIGTERM while a keyed request's
// handler is still running. The server drains for -shutdown-timeout, then
// cancels the handler, whose store rolls back (PostgreSQL) or releases the
// claim (Redis), and exits 0 well before the handler would have finished. After a
// restart, the retry with the same key runs (no orphaned claim answering 409)
// and there is one payment in all. On PostgreSQL directly, through PgBouncer in
// transaction mode, and on Redis with the payments in PostgreSQL.
func TestBinarySIGTERMMidHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) []string
		fault string
		// running returns once the handler holds its claim.
		running func(t *testing.T, app, key string)
	}{
		{"postgres, before the write", pgArgs(postgresURL), "Chaos-Delay", pgRunning(postgresURL)},
		{"postgres, after the write", pgArgs(postgresURL), "Chaos-Delay-After-Write", pgRunning(postgresURL)},
		{"pgbouncer, after the write", pgArgs(pgbouncerURL), "Chaos-Delay-After-Write", pgRunning(postgresURL)},
		{"redis, before the write", redisArgs, "Chaos-Delay", redisRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(tc.store(t), "-chaos", "-shutdown-timeout", "300ms")
			app := unique("idemterm")
			p := startBinary(t, withApp(args, app)...)
			customer, key := unique("cus"), unique("key")
			body := `{"customer":"` + customer + `","amount":700,"currency":"EUR"}`

			sent := make(chan struct{})
			go func() {
				defer close(sent)
				req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(body))
				req.Header.Set(server.HeaderKey, key)
				req.Header.Set(tc.fault, "50s")
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close() // 503 (cancelled) or a cut connection: either way not a 201
					if resp.StatusCode == http.StatusCreated {
						t.Errorf("the cancelled request was answered 201")
					}
				}
			}()
			tc.running(t, app, key)
			start := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := exitStatus(p.cmd.Wait())
			took := time.Since(start)
			<-sent
			// 300ms of drain, then at most two 5s grace periods: far below the
			// handler's 50s.
			if code != 0 || took > 20*time.Second {
				t.Fatalf("exit status %d after %v; want 0 within the drain and grace; stderr:\n%s", code, took, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), "cancelling requests still running") {
				t.Errorf("the cancellation was not logged:\n%s", p.stderr)
			}

			p2 := startBinary(t, args...)
			resp, b := doRequest(t, http.MethodPost, p2.url+"/payments", key, body, nil)
			if resp.StatusCode != http.StatusCreated || resp.Header.Get(server.HeaderReplayed) != "" {
				t.Fatalf("retry after the restart: %d %v %s; want a first execution", resp.StatusCode, resp.Header, b)
			}
			if n := paymentsCount(t, p2.url, customer); n != "1" {
				t.Errorf("payments after shutdown and retry = %s, want exactly 1", n)
			}
		})
	}
}

func pgbouncerURL(t *testing.T) string {
	t.Helper()
	url := servicetest.PgBouncerURL()
	if url == "" {
		t.Skipf("%s not set: start PgBouncer in transaction mode (.ci/pgbouncer.sh start prints its URL) and set it to run this test through it", servicetest.EnvPgBouncerURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url+"&default_query_exec_mode=simple_protocol")
	if err == nil {
		err = pool.Ping(ctx)
		pool.Close()
	}
	if err != nil {
		unavailable(t, "PgBouncer", url, servicetest.EnvPgBouncerURL, err)
	}
	return url
}

func pgArgs(url func(*testing.T) string) func(*testing.T) []string {
	return func(t *testing.T) []string { return []string{"-store", "postgres", "-postgres-url", url(t)} }
}

func redisArgs(t *testing.T) []string {
	return []string{"-store", "redis", "-redis-addr", redisAddr(t), "-ledger-postgres-url", postgresURL(t)}
}

// withApp names the server's PostgreSQL sessions app, so the test can see them.
func withApp(args []string, app string) []string {
	out := append([]string{}, args...)
	for i := range out {
		if (out[i] == "-postgres-url" || out[i] == "-ledger-postgres-url") && i+1 < len(out) {
			out[i+1] = withAppName(out[i+1], app)
		}
	}
	return out
}

// pgRunning: the handler runs inside its transaction (the claim).
func pgRunning(url func(*testing.T) string) func(t *testing.T, app, key string) {
	return func(t *testing.T, app, _ string) { waitInTransaction(t, url(t), app, 1) }
}

// redisRunning: the claim of key is in Redis. There is no channel across
// processes, so it polls, bounded by a deadline.
func redisRunning(t *testing.T, _, key string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var keys []string
		var cursor uint64
		var err error
		for {
			var page []string
			page, cursor, err = rdb.Scan(ctx, cursor, "*:"+key, 1000).Result()
			keys = append(keys, page...)
			if err != nil || cursor == 0 || len(keys) > 0 {
				break
			}
		}
		if err == nil && len(keys) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the claim of %s never appeared in Redis (last error %v)", key, err)
		case <-tick.C:
		}
	}
}
