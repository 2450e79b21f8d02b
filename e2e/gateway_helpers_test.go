package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testkit/lossyproxy"
	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/internal/testkit/syncbuf"
)

// The upstreams of the gateway tests: the orders APIs of
// cmd/idem-server/testdata/upstreams, which have no idempotency of their own
// and count their own effects (docs/gateway.md's quick start uses them).
var upstreamLangs = []struct {
	name    string
	command string // looked up in PATH
	script  string
}{
	{"node", "node", "orders.js"},
	{"python", "python3", "orders.py"},
}

// upstreamProcess is a running orders API.
type upstreamProcess struct {
	URL string
	// orders receives a line "order ID CUSTOMER" for each order made.
	orders chan string
}

// startUpstream starts the orders API in language lang on a free loopback
// port and stops it when the test ends. A missing interpreter skips the test,
// or fails it with IDEM_REQUIRE_SERVICES=1.
func startUpstream(t *testing.T, lang string) *upstreamProcess {
	t.Helper()
	skipShort(t)
	var command, script string
	for _, l := range upstreamLangs {
		if l.name == lang {
			command, script = l.command, l.script
		}
	}
	bin, err := exec.LookPath(command)
	if err != nil {
		servicetest.Unreachable(t, "%s not in PATH (%v): install it to run the gateway in front of a %s service", command, err, lang)
	}
	cmd := exec.Command(bin, filepath.Join("..", "cmd", "idem-server", "testdata", "upstreams", script), "0")
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	u := &upstreamProcess{orders: make(chan string, 1024)}
	lines := bufio.NewScanner(stdout)
	listening := make(chan string, 1)
	go func() {
		for lines.Scan() {
			line := lines.Text()
			if addr, ok := strings.CutPrefix(line, "listening on "); ok {
				listening <- addr
				continue
			}
			u.orders <- line
		}
	}()
	select {
	case u.URL = <-listening:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %s: not listening after 30s; stderr:\n%s", command, script, stderr.Tail(20))
	}
	return u
}

// count asks the upstream itself how many orders customer has.
func (u *upstreamProcess) count(t *testing.T, customer string) int {
	t.Helper()
	resp, err := http.Get(u.URL + "/orders?customer=" + url.QueryEscape(customer))
	if err != nil {
		t.Fatalf("counting the orders of %s: %v", customer, err)
	}
	defer resp.Body.Close()
	var c struct{ Count *int }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Count == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("counting the orders of %s: %d, %v", customer, resp.StatusCode, err)
	}
	return *c.Count
}

// waitOrders waits until the upstream has made n more orders.
func (u *upstreamProcess) waitOrders(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-u.orders:
		case <-time.After(30 * time.Second):
			t.Fatalf("the upstream made fewer than %d orders in 30s", n)
		}
	}
}

// release answers every request the upstream holds (X-Hold: 1).
func (u *upstreamProcess) release(t *testing.T) {
	t.Helper()
	resp, err := http.Post(u.URL+"/release", "", nil)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	resp.Body.Close()
}

// orderBody is the JSON of an order of customer.
func orderBody(customer string, amount int) string {
	return fmt.Sprintf(`{"customer":%q,"amount":%d}`, customer, amount)
}

// lossyFront is a proxy in front of the gateway that loses answers after the
// upstream acted (lossyproxy): the first attempt of each key is forwarded, and
// the client's connection is cut once the gateway's whole answer is read.
// Later attempts, and requests without a key, are answered.
func lossyFront(t *testing.T, target string) *httptest.Server {
	t.Helper()
	return lossyproxy.Start(t, target, func(key string, attempt int) bool { return key != "" && attempt == 1 })
}
