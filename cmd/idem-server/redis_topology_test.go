package main

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
)

const topologyHowTo = "run .ci/redis-topologies.sh start and export what .ci/redis-topologies.sh print-env prints"

// TestRedisTopologies (issue 10): idem-server on a Redis Cluster (a comma list,
// or one seed with -redis-cluster) and through Sentinel (with and without
// -redis-min-replicas) serves the contract end to end: execute, replay byte
// for byte, one payment. Before, a list failed with "too many colons" and one
// Cluster node answered a third of the requests with 503 (MOVED).
func TestRedisTopologies(t *testing.T) {
	t.Parallel()
	cluster := func(t *testing.T) []string {
		addrs := servicetest.Optional(t, servicetest.EnvRedisClusterAddrs, topologyHowTo)
		reachable(t, "Redis Cluster", addrs[0], servicetest.EnvRedisClusterAddrs)
		return addrs
	}
	sentinel := func(t *testing.T) ([]string, string) {
		addrs := servicetest.Optional(t, servicetest.EnvRedisSentinelAddrs, topologyHowTo)
		name := servicetest.Optional(t, servicetest.EnvRedisMasterName, topologyHowTo)
		reachable(t, "Redis Sentinel", addrs[0], servicetest.EnvRedisSentinelAddrs)
		waitSyncedReplica(t, addrs[0], name[0])
		return addrs, name[0]
	}
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"cluster list", func(t *testing.T) []string {
			return []string{"-redis-addr", strings.Join(cluster(t), ",")}
		}},
		{"cluster one seed", func(t *testing.T) []string {
			return []string{"-redis-addr", cluster(t)[1], "-redis-cluster"}
		}},
		{"sentinel", func(t *testing.T) []string {
			addrs, name := sentinel(t)
			return []string{"-redis-addr", strings.Join(addrs, ","), "-redis-master-name", name}
		}},
		{"sentinel min replicas", func(t *testing.T) []string {
			addrs, name := sentinel(t)
			return []string{"-redis-addr", strings.Join(addrs, ","), "-redis-master-name", name,
				"-redis-min-replicas", "1", "-redis-replica-timeout", "2s"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, stop, logs := startRun(t, append([]string{"-store", "redis"}, tc.args(t)...)...)
			// Many keys, so that every Cluster slot range is hit.
			for i := range 12 {
				customer, key := unique("cus"), unique("key")
				body := `{"customer":"` + customer + `","amount":` + strconv.Itoa(100+i) + `,"currency":"EUR"}`
				first, fb := doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
				replay, rb := doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
				if first.StatusCode != http.StatusCreated || replay.StatusCode != http.StatusCreated ||
					replay.Header.Get(server.HeaderReplayed) != "true" || string(fb) != string(rb) {
					t.Fatalf("first %d %s; replay %d %s; log:\n%s", first.StatusCode, fb, replay.StatusCode, rb, logs)
				}
				if n := paymentsCount(t, url, customer); n != "1" {
					t.Fatalf("payments = %s, want 1", n)
				}
			}
			if err := stop(); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
}

// waitSyncedReplica waits until the sentinel at addr sees a replica of master
// that is in sync (a failover test of redisstore may have just moved the
// master): -redis-min-replicas 1 needs one to acknowledge.
func waitSyncedReplica(t *testing.T, addr, master string) {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer func() { _ = sc.Close() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		replicas, err := sc.Replicas(context.Background(), master).Result()
		for _, r := range replicas {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel at %s sees no synced replica of %s (%v, %v)", addr, master, replicas, err)
		}
		time.Sleep(100 * time.Millisecond) // polling Sentinel's view
	}
}

func reachable(t *testing.T, what, addr, env string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		unavailable(t, what, addr, env, err)
	}
	_ = conn.Close()
}

// Private servers of these tests (redis-server, PostgreSQL, proxies) listen
// on 127.0.0.1:7140-7149 only, moved by IDEM_PRIVATE_PORT_OFFSET.
var privatePorts = servicetest.NewPorts(7140, 7149)

// privateRedis is a redis-server of the test's own; its dir is kept across
// restarts.
type privateRedis struct {
	t    *testing.T
	addr string
	dir  string
	args []string
	cmd  *exec.Cmd
}

// privateAddr returns a loopback address in the private range on which nothing
// listens now, for a server of the test's own (servicetest.Ports: handed out
// in turn).
func privateAddr(t *testing.T) string {
	t.Helper()
	return privatePorts.Addr(t)
}

// startPrivateRedis starts a redis-server of the test's own with args, stopped
// at cleanup.
func startPrivateRedis(t *testing.T, args ...string) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		servicetest.Unreachable(t, "redis-server not in PATH (%v): install it (apt-get install redis-server)", err)
	}
	r := &privateRedis{t: t, dir: t.TempDir(), args: args, addr: privateAddr(t)}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *privateRedis) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command("redis-server", append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no"}, r.args...)...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("private redis-server on %s did not come up", r.addr)
		}
		time.Sleep(5 * time.Millisecond) // polling for the server to accept connections
	}
}

func (r *privateRedis) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}
