package check_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testkit/buildtest"
)

// bins holds the idem-server binary the tests build; TestMain removes it.
var bins = buildtest.New("idem-check-bin-")

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

// buildIdemServer builds cmd/idem-server once, through the go.work workspace
// (the command is a module of its own; idem-check does not require it).
func buildIdemServer() (string, error) {
	return bins.Build("idem-server", filepath.Join("..", "..", "idem-server"))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// needService skips the test when nothing listens at addr, or fails it under
// IDEM_REQUIRE_SERVICES=1.
func needService(t *testing.T, name, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return
	}
	if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
		t.Fatalf("%s at %s: %v (IDEM_REQUIRE_SERVICES=1)", name, addr, err)
	}
	t.Skipf("%s at %s is not reachable (%v); set IDEM_REQUIRE_SERVICES=1 to fail instead", name, addr, err)
}

// postgresSchema creates a schema of its own in the database of pgURL (with
// psql), dropped when the test ends, after the server has stopped, and
// returns the URL whose search_path puts idem-server's fixed tables there:
// the shared server's other tables are never touched.
func postgresSchema(t *testing.T, pgURL string) string {
	t.Helper()
	psql, err := exec.LookPath("psql")
	if err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatalf("psql not found (IDEM_REQUIRE_SERVICES=1): %v", err)
		}
		t.Skipf("psql not found (%v): it makes the test's own schema; set IDEM_REQUIRE_SERVICES=1 to fail instead", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idem_check_" + hex.EncodeToString(b[:])
	exec1 := func(sql string) error {
		out, err := exec.Command(psql, pgURL, "-v", "ON_ERROR_STOP=1", "-qAtc", sql).CombinedOutput()
		if err != nil {
			return fmt.Errorf("psql %q: %v\n%s", sql, err, out)
		}
		return nil
	}
	if err := exec1("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := exec1("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatalf("IDEM_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

var listeningURL = regexp.MustCompile(`http://[^\s]+`)

// startIdemServer runs the idem-server binary with args on a free loopback
// port and returns its URL; the test stops it.
func startIdemServer(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := buildIdemServer()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-chaos"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := listeningURL.FindString(sc.Text()); u != "" {
				select {
				case urls <- u:
				default:
				}
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("idem-server still running 15s after SIGTERM; killed")
		}
	})
	select {
	case u := <-urls:
		return u
	case err := <-exited:
		t.Fatalf("idem-server %v exited before listening: %v\n%s", args, err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("idem-server %v did not say where it listens in 30s\n%s", args, stderr.String())
	}
	return ""
}

// The idem-server binary passes every row, strictly, on each of its stores,
// with a real TTL (the expiry and retention rows wait it out) and a lease of
// a second (-lock-ttl) that the lease row's handler outlasts three times.
// Its flags are the defaults but for the store, -chaos, -ttl and -lock-ttl.
func TestIdemServerBinaryPassesEveryRow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idem-server")
	}
	if out, err := exec.Command("go", "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		t.Skip("builds cmd/idem-server through the go.work workspace, which is off here")
	}
	pgURL := envOr("IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	redisAddr := envOr("IDEM_REDIS_ADDR", "127.0.0.1:6379")
	pgAddr := "127.0.0.1:5432"
	if u, err := url.Parse(pgURL); err == nil && u.Host != "" {
		pgAddr = u.Host
	}
	const ttl, lease = 4 * time.Second, time.Second
	for _, tc := range []struct {
		store   string
		service string // host:port it needs, "" for none
		args    []string
	}{
		{"memory", "", nil},
		{"postgres", pgAddr, nil}, // -postgres-url: a schema of its own, below
		{"redis", redisAddr, []string{"-store", "redis", "-redis-addr", redisAddr}},
	} {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			if tc.service != "" {
				needService(t, tc.store, tc.service)
			}
			if tc.store == "postgres" {
				tc.args = []string{"-store", "postgres", "-postgres-url", postgresSchema(t, pgURL)}
			}
			base := startIdemServer(t, append([]string{"-ttl", ttl.String(), "-lock-ttl", lease.String()}, tc.args...)...)
			c := countedConfig(idemServerConfig(base, ttl, lease))
			rep := run(t, c.cfg)
			wantEveryRowPasses(t, rep)
			wantWithinBound(t, c, rep)
		})
	}
}
