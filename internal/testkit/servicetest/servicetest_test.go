package servicetest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended instead of ending.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper()            {}
func (r *recorder) Fatal(a ...any)     { r.failed, r.msg = true, a[0].(string) }
func (r *recorder) Skip(a ...any)      { r.skipped, r.msg = true, a[0].(string) }
func (r *recorder) Failed() bool       { return r.failed }
func (r *recorder) Name() string       { return "recorder" }
func (r *recorder) Setenv(_, _ string) {}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		require    string
		fail, skip bool
		wantInMsg  string
	}{
		{"", false, true, "set IDEM_REQUIRE_SERVICES=1 to fail"},
		{"0", false, true, "set IDEM_REQUIRE_SERVICES=1 to fail"},
		{"1", true, false, "IDEM_REQUIRE_SERVICES=1 makes this a failure"},
	} {
		t.Run("IDEM_REQUIRE_SERVICES="+tc.require, func(t *testing.T) {
			t.Setenv(EnvRequire, tc.require)
			r := &recorder{}
			Unreachable(r, "Redis not reachable at %s", "127.0.0.1:1")
			if r.failed != tc.fail || r.skipped != tc.skip {
				t.Fatalf("failed %v skipped %v, want %v %v", r.failed, r.skipped, tc.fail, tc.skip)
			}
			if !strings.HasPrefix(r.msg, "Redis not reachable at 127.0.0.1:1") || !strings.Contains(r.msg, tc.wantInMsg) {
				t.Errorf("message %q", r.msg)
			}
		})
	}
}

func TestAddresses(t *testing.T) {
	t.Setenv(EnvPostgresURL, "")
	t.Setenv(EnvRedisAddr, "")
	if PostgresURL() != DefaultPostgresURL || RedisAddr() != DefaultRedisAddr {
		t.Errorf("defaults: %q %q", PostgresURL(), RedisAddr())
	}
	t.Setenv(EnvPostgresURL, "postgres://elsewhere/db")
	t.Setenv(EnvRedisAddr, "10.0.0.1:7000")
	if PostgresURL() != "postgres://elsewhere/db" || RedisAddr() != "10.0.0.1:7000" {
		t.Errorf("overrides: %q %q", PostgresURL(), RedisAddr())
	}
}

func TestOptional(t *testing.T) {
	t.Setenv(EnvRequire, "1") // an unset topology skips even in CI
	t.Setenv(EnvRedisClusterAddrs, "")
	r := &recorder{}
	if got := Optional(r, EnvRedisClusterAddrs, "run .ci/redis-topologies.sh start"); got != nil || !r.skipped ||
		!strings.Contains(r.msg, EnvRedisClusterAddrs) || !strings.Contains(r.msg, "redis-topologies.sh") {
		t.Fatalf("unset: got %v, skipped %v, message %q", got, r.skipped, r.msg)
	}
	t.Setenv(EnvRedisClusterAddrs, "a:1,b:2")
	r = &recorder{}
	if got := Optional(r, EnvRedisClusterAddrs, ""); r.skipped || len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Fatalf("set: got %q, skipped %v", got, r.skipped)
	}
}

func TestPort(t *testing.T) {
	for _, tc := range []struct {
		offset string
		want   int
	}{
		{"", 7150},
		{"10000", 17150},
		{"-7000", 150},
		{"not a number", 7150},
		{"60000", 7150}, // out of range: ignored
		{"-7150", 7150}, // port 0: ignored
	} {
		t.Run("offset "+tc.offset, func(t *testing.T) {
			t.Setenv(EnvPortOffset, tc.offset)
			if got := Port(7150); got != tc.want {
				t.Fatalf("Port(7150) = %d, want %d", got, tc.want)
			}
		})
	}
}

// fatalRecorder records a Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper()                      {}
func (r *fatalRecorder) Fatalf(f string, args ...any) { r.msg = fmt.Sprintf(f, args...) }

func TestPorts(t *testing.T) {
	t.Setenv(EnvPortOffset, "5")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	want := "127.0.0.1:" + strconv.Itoa(port)
	_ = l.Close()
	p := NewPorts(port-5, port-5) // moved by the offset to port
	if got := p.Addr(t); got != want {
		t.Fatalf("Addr = %s, want %s (the offset applied)", got, want)
	}
	busy, err := net.Listen("tcp", want)
	if err != nil {
		t.Skipf("port %d taken again before the test could: %v", port, err)
	}
	defer busy.Close()
	r := &fatalRecorder{}
	if got := p.Addr(r); got != "" || !strings.Contains(r.msg, "no free port in "+want+"-") {
		t.Errorf("Addr with the only port busy = %q, failure %q; want a failure naming the range", got, r.msg)
	}
}
