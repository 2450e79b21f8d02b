package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testkit/servicetest"
)

// The gateway in front of a Node and a Python service, neither of which has
// any idempotency, through a proxy that loses the first answer of every key
// after the upstream acted: the idem client and a plain curl retry loop each
// learn every outcome (201, replayed), and every order is made once. The
// same clients through the same proxy in front of the bare service make
// every order twice: the service really does not deduplicate.
func TestGatewayInFrontOfServices(t *testing.T) {
	t.Parallel()
	for _, lang := range upstreamLangs {
		t.Run(lang.name, func(t *testing.T) {
			t.Parallel()
			up := startUpstream(t, lang.name)
			gw := startServer(t, "-upstream", up.URL)
			t.Run("idem client", func(t *testing.T) {
				front := lossyFront(t, gw.URL)
				for i := range 6 {
					customer := fmt.Sprintf("idem-%s-%d", lang.name, i)
					r := idemOrder(t, front.URL, customer)
					if r.status != http.StatusCreated || !r.replayed || !strings.Contains(string(r.body), customer) {
						t.Errorf("order %d: %d replayed=%v %s, want the first answer replayed after its loss", i, r.status, r.replayed, r.body)
					}
					if n := up.count(t, customer); n != 1 {
						t.Errorf("order %d: the %s service made it %d times, want 1", i, lang.name, n)
					}
				}
			})
			t.Run("curl loop", func(t *testing.T) {
				if _, err := exec.LookPath("curl"); err != nil {
					servicetest.Unreachable(t, "curl not in PATH (%v): install it to run the shell client", err)
				}
				front := lossyFront(t, gw.URL)
				for i := range 4 {
					customer := fmt.Sprintf("curl-%s-%d", lang.name, i)
					status, body := curlOrder(t, front.URL, "curl-key-"+customer, customer)
					if status != "201" || !strings.Contains(body, customer) {
						t.Errorf("order %d: %s %s, want the recorded 201", i, status, body)
					}
					if n := up.count(t, customer); n != 1 {
						t.Errorf("order %d: the %s service made it %d times, want 1", i, lang.name, n)
					}
				}
			})
			t.Run("bare service control", func(t *testing.T) {
				front := lossyFront(t, up.URL)
				customer := "bare-" + lang.name
				if r := idemOrder(t, front.URL, customer); r.status != http.StatusCreated {
					t.Fatalf("bare order: %d %s", r.status, r.body)
				}
				if n := up.count(t, customer); n != 2 {
					t.Errorf("without the gateway the %s service made the order %d times, want 2 (the lost answer's retry)", lang.name, n)
				}
			})
		})
	}
}

// idemOrder makes one order of customer through the idem client (a key per
// operation, retries on a lost answer).
func idemOrder(t *testing.T, base, customer string) reply {
	t.Helper()
	client := &http.Client{Transport: idem.NewTransport(baseTransport(), idem.WithBackoff(20*time.Millisecond, 200*time.Millisecond),
		idem.WithMaxElapsed(20*time.Second))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(orderBody(customer, 1999)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("order of %s: %v", customer, err)
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, replayed: idem.Replayed(resp), key: keyOf(resp)}
	r.body, r.bodyErr = io.ReadAll(resp.Body)
	return r
}

// curlOrder makes one order of customer with testdata/curl-retry.sh and
// returns the status and body it ended with.
func curlOrder(t *testing.T, base, key, customer string) (status, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join("testdata", "curl-retry.sh"), base+"/orders", key, orderBody(customer, 1999)).Output()
	if err != nil {
		t.Fatalf("curl-retry.sh: %v (%s)", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], strings.Join(lines[:len(lines)-1], "\n")
}

// buildCheck builds cmd/idem-check once per test run.
func buildCheck() (string, error) {
	return bins.Build("idem-check", filepath.Join("..", "cmd", "idem-check"))
}

// idem-check -chaos passes on the gateway in front of each service and fails
// on the bare service, in the chaos rows among others.
func TestGatewayIdemCheck(t *testing.T) {
	t.Parallel()
	for _, lang := range upstreamLangs {
		t.Run(lang.name, func(t *testing.T) {
			t.Parallel()
			up := startUpstream(t, lang.name)
			gw := startServer(t, "-upstream", up.URL, "-chaos")
			bin, err := buildCheck()
			if err != nil {
				t.Fatal(err)
			}
			check := func(base string, extra ...string) (string, int) {
				customer := "check-" + lang.name + "-" + randomSuffix()
				args := append([]string{"-url", base + "/orders", "-body", orderBody(customer, 1999),
					"-H", "Authorization: Bearer alice", "-H", "Content-Type: application/json", "-H2", "Authorization: Bearer bob",
					"-chaos", "-effect-url", base + "/orders?customer=" + customer, "-effect-json", "count"}, extra...)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
				return string(out), exitCode(err)
			}
			out, code := check(gw.URL, "-slow-H", "Chaos-Delay: 1s", "-fail-H", "Chaos-Fail: 500")
			if code != 0 || !strings.Contains(out, "0 FAIL") {
				t.Errorf("idem-check on the gateway in front of %s: exit %d, want 0:\n%s", lang.name, code, out)
			}
			out, code = check(up.URL)
			if code != 1 || !rowFailed(out, "chaos-lost-response") {
				t.Errorf("idem-check on the bare %s service: exit %d, want 1 with chaos-lost-response failed:\n%s", lang.name, code, out)
			}
		})
	}
}

// rowFailed reports whether idem-check's table says FAIL for row.
func rowFailed(out, row string) bool {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "FAIL" && f[1] == row {
			return true
		}
	}
	return false
}

// exitCode is the exit status of a finished command (-1 when it did not run).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
