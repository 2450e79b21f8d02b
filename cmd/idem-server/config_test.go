package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
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

	good := []struct {
		name string
		args []string
		want config
	}{
		{"defaults", nil, config{addr: "127.0.0.1:8080", store: "memory", redisAddr: "127.0.0.1:6379", redisReplicaTimeout: time.Second,
			ttl: server.DefaultTTL, lockTTL: server.DefaultLockTTL, maxEntries: memstore.DefaultMaxEntries, shutdownTimeout: 10 * time.Second}},
		{"everything", []string{"-addr", ":9000", "-store", "postgres", "-postgres-url", "postgres://localhost/idem",
			"-ttl", "1h", "-lock-ttl", "5s", "-chaos", "-chaos-fail-rate", "0.1",
			"-chaos-drop-rate", "1", "-chaos-delay-max", "1m", "-shutdown-timeout", "1s"},
			config{addr: ":9000", store: "postgres", postgresURL: "postgres://localhost/idem", redisAddr: "127.0.0.1:6379", redisReplicaTimeout: time.Second,
				ttl: time.Hour, lockTTL: 5 * time.Second, maxEntries: memstore.DefaultMaxEntries, chaos: true, chaosFailRate: 0.1,
				chaosDropRate: 1, chaosDelayMax: time.Minute, shutdownTimeout: time.Second}},
		{"redis sentinel", []string{"-store", "redis", "-redis-addr", "10.0.0.1:26379, 10.0.0.2:26379", "-redis-master-name", "mymaster",
			"-redis-min-replicas", "1", "-redis-replica-timeout", "250ms", "-redis-allow-eviction"},
			config{addr: "127.0.0.1:8080", store: "redis", redisAddr: "10.0.0.1:26379, 10.0.0.2:26379", redisMasterName: "mymaster",
				redisMinReplicas: 1, redisReplicaTimeout: 250 * time.Millisecond, redisAllowEviction: true,
				ttl: server.DefaultTTL, lockTTL: server.DefaultLockTTL, maxEntries: memstore.DefaultMaxEntries, shutdownTimeout: 10 * time.Second}},
		{"redis cluster one seed", []string{"-store", "redis", "-redis-addr", "[::1]:7000", "-redis-cluster"},
			config{addr: "127.0.0.1:8080", store: "redis", redisAddr: "[::1]:7000", redisCluster: true, redisReplicaTimeout: time.Second,
				ttl: server.DefaultTTL, lockTTL: server.DefaultLockTTL, maxEntries: memstore.DefaultMaxEntries, shutdownTimeout: 10 * time.Second}},
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
