package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/redisstore"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		args []string
	}{
		{"unknown store", []string{"-store", "mysql"}},
		{"negative ttl", []string{"-ttl", "-1s"}},
		{"zero ttl", []string{"-ttl", "0"}},
		{"ttl not a duration", []string{"-ttl", "day"}},
		{"negative lock ttl", []string{"-lock-ttl", "-5s"}},
		{"fail rate above 1", []string{"-chaos-fail-rate", "1.5"}},
		{"fail rate negative", []string{"-chaos-fail-rate", "-0.1"}},
		{"drop rate NaN", []string{"-chaos-drop-rate", "NaN"}},
		{"drop rate above 1", []string{"-chaos-drop-rate", "2"}},
		{"delay max too long", []string{"-chaos-delay-max", "2m"}},
		{"delay max negative", []string{"-chaos-delay-max", "-1ms"}},
		{"zero max entries", []string{"-max-entries", "0"}},
		{"zero max bytes", []string{"-max-bytes", "0"}},
		{"zero scope entries", []string{"-store", "redis", "-redis-scope-max-entries", "0"}},
		{"zero scope bytes", []string{"-store", "redis", "-redis-scope-max-bytes", "0"}},
		{"zero postgres scope entries", []string{"-store", "postgres", "-postgres-url", "postgres://x/y", "-postgres-scope-max-entries", "0"}},
		{"zero postgres scope bytes", []string{"-store", "postgres", "-postgres-url", "postgres://x/y", "-postgres-scope-max-bytes", "0"}},
		{"postgres scope entries with -store redis", []string{"-store", "redis", "-postgres-scope-max-entries", "5"}},
		{"zero buffered bytes", []string{"-max-buffered-bytes", "0"}},
		{"negative max waiting", []string{"-max-waiting", "-1"}},
		{"negative request timeout", []string{"-request-timeout", "-1s"}},
		{"zero max payments", []string{"-max-payments", "0"}},
		{"max payments with a PostgreSQL ledger", []string{"-store", "postgres", "-postgres-url", "postgres://x/y", "-max-payments", "5"}},
		{"max payments with -ledger-postgres-url", []string{"-ledger-postgres-url", "postgres://x/y", "-max-payments", "5"}},
		{"scope entries with -store memory", []string{"-redis-scope-max-entries", "5"}},
		{"max bytes with -store redis", []string{"-store", "redis", "-max-bytes", "5"}},
		{"postgres without url", []string{"-store", "postgres"}},
		{"redis without addr", []string{"-store", "redis", "-redis-addr", ""}},
		{"redis addr without port", []string{"-store", "redis", "-redis-addr", "127.0.0.1"}},
		{"redis addr list with an empty entry", []string{"-store", "redis", "-redis-addr", "a:1,,b:2"}},
		{"redis addr list with a bad entry", []string{"-store", "redis", "-redis-addr", "a:1,b"}},
		{"redis cluster and sentinel", []string{"-store", "redis", "-redis-cluster", "-redis-master-name", "m"}},
		{"negative min replicas", []string{"-redis-min-replicas", "-1"}},
		{"zero replica timeout", []string{"-redis-replica-timeout", "0s"}},
		{"empty addr", []string{"-addr", ""}},
		{"zero shutdown timeout", []string{"-shutdown-timeout", "0s"}},
		{"unknown flag", []string{"-verbose"}},
		{"positional argument", []string{"serve"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tt.args, io.Discard)
			if !errors.Is(err, errUsage) {
				t.Fatalf("parseFlags(%q) = %v, want a usage error", tt.args, err)
			}
			if code := exitCode(err, io.Discard); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
		})
	}

	// defaults is the configuration of no flags; each case changes it.
	defaults := config{addr: "127.0.0.1:8080", store: "memory", redisAddr: "127.0.0.1:6379", redisReplicaTimeout: time.Second,
		redisScopeEntries: redisstore.DefaultScopeMaxEntries, redisScopeBytes: redisstore.DefaultScopeMaxBytes,
		pgScopeEntries: pgstore.DefaultScopeMaxEntries, pgScopeBytes: pgstore.DefaultScopeMaxBytes,
		ttl: server.DefaultTTL, lockTTL: server.DefaultLockTTL, maxEntries: memstore.DefaultMaxEntries,
		maxBytes: memstore.DefaultMaxBytes, anonymous: true, maxBuffered: server.DefaultBufferedBytes,
		maxWaiting: server.DefaultWaiting, requestTimeout: server.DefaultRequestTimeout, maxPayments: defaultMaxPayments,
		shutdownTimeout: 10 * time.Second}
	with := func(change func(*config)) config {
		c := defaults
		change(&c)
		return c
	}
	good := []struct {
		name string
		args []string
		want config
	}{
		{"defaults", nil, defaults},
		{"everything", []string{"-addr", ":9000", "-store", "postgres", "-postgres-url", "postgres://localhost/idem",
			"-ttl", "1h", "-lock-ttl", "5s", "-chaos", "-chaos-fail-rate", "0.1",
			"-chaos-drop-rate", "1", "-chaos-delay-max", "1m", "-shutdown-timeout", "1s",
			"-tokens", "/etc/idem/tokens", "-anonymous=false", "-max-buffered-bytes", "1048576", "-max-waiting", "0",
			"-request-timeout", "0s", "-postgres-scope-max-entries", "7", "-postgres-scope-max-bytes", "8"},
			with(func(c *config) {
				c.addr, c.store, c.postgresURL, c.ttl, c.lockTTL = ":9000", "postgres", "postgres://localhost/idem", time.Hour, 5*time.Second
				c.chaos, c.chaosFailRate, c.chaosDropRate, c.chaosDelayMax, c.shutdownTimeout = true, 0.1, 1, time.Minute, time.Second
				c.tokensFile, c.anonymous, c.maxBuffered, c.maxWaiting, c.requestTimeout = "/etc/idem/tokens", false, 1<<20, 0, 0
				c.pgScopeEntries, c.pgScopeBytes = 7, 8
			})},
		{"tokens: no anonymous callers by default", []string{"-tokens", "f"},
			with(func(c *config) { c.tokensFile, c.anonymous = "f", false })},
		{"tokens and anonymous callers", []string{"-tokens", "f", "-anonymous"},
			with(func(c *config) { c.tokensFile, c.anonymous = "f", true })},
		{"memory bounds", []string{"-max-entries", "10", "-max-bytes", "4096", "-max-payments", "7"},
			with(func(c *config) { c.maxEntries, c.maxBytes, c.maxPayments = 10, 4096, 7 })},
		{"redis sentinel", []string{"-store", "redis", "-redis-addr", "10.0.0.1:26379, 10.0.0.2:26379", "-redis-master-name", "mymaster",
			"-redis-min-replicas", "1", "-redis-replica-timeout", "250ms", "-redis-allow-eviction",
			"-redis-scope-max-entries", "5", "-redis-scope-max-bytes", "6"},
			with(func(c *config) {
				c.store, c.redisAddr, c.redisMasterName = "redis", "10.0.0.1:26379, 10.0.0.2:26379", "mymaster"
				c.redisMinReplicas, c.redisReplicaTimeout, c.redisAllowEviction = 1, 250*time.Millisecond, true
				c.redisScopeEntries, c.redisScopeBytes = 5, 6
			})},
		{"redis cluster one seed", []string{"-store", "redis", "-redis-addr", "[::1]:7000", "-redis-cluster"},
			with(func(c *config) { c.store, c.redisAddr, c.redisCluster = "redis", "[::1]:7000", true })},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseFlags(tt.args, io.Discard)
			got.gateway = gatewayConfig{} // the demo mode's: TestGatewayFlags has the gateway's
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parseFlags = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"clean", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"usage", usageErr("x"), 2},
		{"other", errors.New("listen: address in use"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err, io.Discard); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// TestStoreUnreachable: a store that cannot be reached is a clear start-up
// error (exit 1) that names what was unreachable, not a hang or a panic.
func TestStoreUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "postgres", "-postgres-url", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"}, "cannot reach PostgreSQL"},
		{[]string{"-store", "redis", "-redis-addr", "127.0.0.1:1"}, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"-store", "postgres", "-postgres-url", "::not a url::"}, "-postgres-url"},
	} {
		err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err, io.Discard) != 1 {
			t.Errorf("run(%q) = %v, want an error containing %q and exit 1", tc.args, err, tc.want)
		}
	}
}

// TestTimeLadder: the defaults nest, each inside the one above it
// (docs/CONTRACT.md): the idem client's cap, then the server's request time,
// then the gateway's upstream time-out; a -request-timeout that reaches the
// client's cap, or sets none, is warned about at start, naming the flag and
// the client's option, and the defaults are not.
func TestTimeLadder(t *testing.T) {
	t.Parallel()
	if !(defaultUpstreamTimeout < server.DefaultRequestTimeout && server.DefaultRequestTimeout < idem.DefaultMaxElapsed) {
		t.Fatalf("the defaults do not nest: -upstream-timeout %v, -request-timeout %v, the client's cap %v",
			defaultUpstreamTimeout, server.DefaultRequestTimeout, idem.DefaultMaxElapsed)
	}
	for _, tc := range []struct {
		args []string
		warn string // "" for none
	}{
		{nil, ""},
		{[]string{"-request-timeout", "29s"}, ""},
		{[]string{"-request-timeout", "30s"}, "-request-timeout 30s is not below the idem client's default cap (WithMaxElapsed 30s)"},
		{[]string{"-request-timeout", "1m"}, "-request-timeout 1m0s is not below the idem client's default cap"},
		{[]string{"-request-timeout", "0"}, "-request-timeout 0 sets no deadline on a protected request"},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := c.ladderWarning(); tc.warn == "" && got != "" || !strings.Contains(got, tc.warn) {
			t.Errorf("%v: warning %q, want %q", tc.args, got, tc.warn)
		}
	}
}

// TestBinaryWarnsOfABrokenLadder: the binary logs the warning at start, and
// serves all the same. Its standard error is read once it has exited: the
// copy of the pipe may lag the listening line on standard output.
func TestBinaryWarnsOfABrokenLadder(t *testing.T) {
	t.Parallel()
	stderrOf := func(args ...string) string {
		p := startBinary(t, args...)
		resp, err := http.Get(p.url + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz of idem-server %v: %v %v", args, resp, err)
		}
		resp.Body.Close()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := exitStatus(p.cmd.Wait()); code != 0 {
			t.Fatalf("idem-server %v: exit status %d after SIGTERM; stderr:\n%s", args, code, p.stderr)
		}
		return p.stderr.String()
	}
	if out := stderrOf("-request-timeout", "45s"); !strings.Contains(out,
		`"level":"WARN","msg":"-request-timeout 45s is not below the idem client's default cap`) {
		t.Errorf("no warning of the ladder at start; stderr:\n%s", out)
	}
	if out := stderrOf(); strings.Contains(out, "WithMaxElapsed") {
		t.Errorf("a warning of the ladder on the defaults; stderr:\n%s", out)
	}
}
