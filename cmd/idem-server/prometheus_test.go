package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testkit/syncbuf"
	idemotel "github.com/idemkit/idem/otel"
)

// envPrometheus names the Prometheus binary TestPrometheusSoak runs
// (.ci/prometheus-soak.sh sets it after installing Debian's prometheus).
const envPrometheus = "IDEM_PROMETHEUS"

// promPorts is the loopback port range a private Prometheus may listen on.
const promPortFirst, promPortLast = 17200, 17299

// faultPlan says which fault the first attempt of soak operation i meets,
// and the reason of the retry it causes; retries meet none, so every
// operation ends in a success and the counts are exact.
func faultPlan(i int) (header, value, reason string) {
	switch {
	case i%20 == 3: // a slow first request, and a duplicate sent beside it (see duplicate) that waits for it, or the reverse
		return "Chaos-Delay", "1s", ""
	case i%4 == 0: // recorded, then the connection is cut: the retry is a replay
		return "Chaos-Drop", "after-record", "network"
	case i%4 == 1: // a gateway's 503 before any work
		return "Chaos-Fail", "503", "status"
	}
	return "", "", ""
}

// soakFaults is the RoundTripper under the client's idem.Transport: it puts
// each operation's planned fault on its first attempt and counts what the
// Transport sent.
type soakFaults struct {
	next     http.RoundTripper
	mu       sync.Mutex
	attempts int
	replays  int // responses marked Idempotent-Replayed
	retries  map[string]int
}

// duplicate reports whether soak operation i is sent twice at once, by the
// idem client and by a plain one: one of the two runs, the other gets the
// replay, having waited in the store while the first ran.
func duplicate(i int) bool { return i%20 == 3 }

func (f *soakFaults) RoundTrip(req *http.Request) (*http.Response, error) {
	info, _ := idem.AttemptFromContext(req.Context())
	f.mu.Lock()
	f.attempts++
	if info.Number > 1 {
		f.retries[info.Reason]++
	}
	f.mu.Unlock()
	if info.Number == 1 {
		if i, err := strconv.Atoi(req.Header.Get("X-Soak-Op")); err == nil {
			if h, v, _ := faultPlan(i); h != "" {
				req = req.Clone(req.Context())
				req.Header.Set(h, v)
			}
		}
	}
	resp, err := f.next.RoundTrip(req)
	if err == nil && idem.Replayed(resp) {
		f.mu.Lock()
		f.replays++
		f.mu.Unlock()
	}
	return resp, err
}

// TestPrometheusSoak: a real Prometheus scrapes the idem-server binary and
// an instrumented client while the client runs a short soak with faults
// (lost responses, 503s, slow requests with a concurrent duplicate); its HTTP
// API then returns the numbers the soak counted: one execution per
// operation, the replays the clients received (non-zero), the duplicates'
// waits, and the client's retries by reason and attempts.
func TestPrometheusSoak(t *testing.T) {
	bin := os.Getenv(envPrometheus)
	if bin == "" {
		t.Skip(envPrometheus + " is not set: .ci/prometheus-soak.sh installs Prometheus and runs this test")
	}
	server := startBinary(t, "-chaos")

	// The client's metrics, for Prometheus to scrape.
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	clientMetrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer clientMetrics.Close()

	prom := startPrometheus(t, bin, strings.TrimPrefix(server.url, "http://"), strings.TrimPrefix(clientMetrics.URL, "http://"))
	prom.waitUp(t, 2)

	// The soak.
	const ops, workers = 200, 8
	// No keep-alive: net/http retries a keyed request whose reused connection
	// was cut, with the same headers, unseen by idem and by this count.
	faults := &soakFaults{next: &http.Transport{DisableKeepAlives: true}, retries: map[string]int{}}
	c := idemotel.NewClient(idemotel.WithMeterProvider(mp))
	var operations, replays, dupReplays, failed atomic.Int64
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	client := &http.Client{Transport: idem.NewTransport(c.Transport(faults), c.Option(),
		idem.WithMaxAttempts(4), idem.WithBackoff(10*time.Millisecond, 50*time.Millisecond),
		idem.WithAttemptTimeout(2*time.Second), idem.WithMaxElapsed(30*time.Second),
		idem.WithOnDone(func(_ context.Context, r idem.Report) { operations.Add(1) }))}
	customer := unique("soak")
	soakStart := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				body := fmt.Sprintf(`{"customer":%q,"amount":%d,"currency":"EUR"}`, customer, i+1)
				key := fmt.Sprintf("%s-%d", customer, i)
				var dup sync.WaitGroup
				if duplicate(i) {
					dup.Go(func() {
						req, _ := http.NewRequest(http.MethodPost, server.url+"/payments", strings.NewReader(body))
						req.Header.Set("Idempotency-Key", key)
						resp, err := plain.Do(req)
						if err != nil {
							t.Errorf("duplicate of operation %d: %v", i, err)
							return
						}
						resp.Body.Close()
						if resp.StatusCode != http.StatusCreated {
							t.Errorf("duplicate of operation %d: status %d", i, resp.StatusCode)
						}
						if idem.Replayed(resp) {
							dupReplays.Add(1)
						}
					})
				}
				req, _ := http.NewRequest(http.MethodPost, server.url+"/payments", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("X-Soak-Op", strconv.Itoa(i))
				resp, err := client.Do(req)
				dup.Wait()
				if err != nil {
					failed.Add(1)
					t.Errorf("operation %d: %v", i, err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					failed.Add(1)
					t.Errorf("operation %d: status %d", i, resp.StatusCode)
				}
				if idem.Replayed(resp) {
					replays.Add(1)
				}
			}
		})
	}
	for i := range ops {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// What the soak counted, and what the plan says it must be.
	want := map[string]int{}
	for i := range ops {
		if _, _, reason := faultPlan(i); reason != "" {
			want[reason]++
		}
	}
	for reason, n := range want {
		if faults.retries[reason] != n {
			t.Errorf("the soak sent %d retries for %s, the plan %d", faults.retries[reason], reason, n)
		}
	}
	// Each lost response makes one replay, each pair of duplicates one; the
	// client receives every replay the server sends.
	duplicates := 0
	for i := range ops {
		if duplicate(i) {
			duplicates++
		}
	}
	sent := faults.replays + int(dupReplays.Load())
	if sent != want["network"]+duplicates || int64(faults.replays) != replays.Load() {
		t.Errorf("replays: %d to the idem client (%d operations ended in one), %d to the duplicates; want %d in all",
			faults.replays, replays.Load(), dupReplays.Load(), want["network"]+duplicates)
	}
	t.Logf("soak: %d operations, %d attempts, %d replays (%d to duplicates), retries %v, in %v", operations.Load(),
		faults.attempts, sent, dupReplays.Load(), faults.retries, time.Since(soakStart).Round(time.Millisecond))
	if n := paymentsCount(t, server.url, customer); n != strconv.Itoa(ops) {
		t.Errorf("the server made %s payments for %d operations", n, ops)
	}

	// What Prometheus scraped.
	checks := []struct {
		query string
		want  float64
	}{
		{`sum(idem_server_requests_total{idem_outcome="executed",http_route="/payments"})`, ops},
		{`sum(idem_server_requests_total{idem_outcome="replayed"})`, float64(sent)},
		{`sum(idem_server_wait_duration_seconds_count{idem_wait_end="replayed"})`, float64(sent)},
		{`sum(idem_server_store_errors_total) or vector(0)`, 0},
		{`sum(idem_client_attempts_count)`, float64(operations.Load())},
		{`sum(idem_client_attempts_sum)`, float64(faults.attempts)},
		{`sum(idem_client_operation_duration_seconds_count{idem_outcome="success"})`, ops},
	}
	for reason, n := range want {
		checks = append(checks, struct {
			query string
			want  float64
		}{fmt.Sprintf(`sum(idem_client_retries_total{idem_retry_reason=%q})`, reason), float64(n)})
	}
	for _, ck := range checks {
		if got, ok := prom.eventually(t, ck.query, ck.want); !ok {
			t.Errorf("Prometheus: %s = %v, want %v (what the soak counted)", ck.query, got, ck.want)
		}
	}
	// The alerts of docs/operating.md parse and do not fire: the soak's
	// faults are all ones idem absorbs.
	for _, alert := range []string{
		`sum by (idem_store, idem_store_error) (rate(idem_server_store_errors_total[5m])) > 0.1`,
		`sum by (http_route, idem_store) (increase(idem_server_requests_total{idem_outcome="outcome-unknown"}[10m])) > 0`,
		`sum by (server_address) (rate(idem_client_budget_refusals_total[5m]))
  / sum by (server_address) (rate(idem_client_operation_duration_seconds_count[5m])) > 0.01`,
	} {
		if v, err := prom.query(alert); err != nil || v != -1 {
			t.Errorf("alert %s: %v, %v; want it parsed and not firing", alert, v, err)
		}
	}
}

// promServer is a private Prometheus.
type promServer struct {
	api string
}

// startPrometheus starts bin on a free loopback port of its range, scraping
// the targets every second, and stops it at the end of the test.
func startPrometheus(t *testing.T, bin string, targets ...string) *promServer {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
	for i, target := range targets {
		fmt.Fprintf(&cfg, "  - job_name: target%d\n    static_configs:\n      - targets: [%q]\n", i, target)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	stderr := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting Prometheus (%s): %v", bin, err)
	}
	exited := make(chan struct{}) // closed when the process has exited, with waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("Prometheus (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
		}
	})
	p := &promServer{api: "http://" + addr}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			t.Fatalf("Prometheus exited: %v\n%s", waitErr, stderr)
		case <-deadline:
			t.Fatalf("Prometheus not ready on %s after 30s:\n%s", addr, stderr)
		case <-tick.C:
			if resp, err := http.Get(p.api + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return p
				}
			}
		}
	}
}

// freePort returns a loopback address in the range that nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	for port := promPortFirst; port <= promPortLast; port++ {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if ln, err := net.Listen("tcp", addr); err == nil {
			_ = ln.Close()
			return addr
		}
	}
	t.Fatalf("no free port in %d-%d", promPortFirst, promPortLast)
	return ""
}

// query runs an instant PromQL query and returns its first value, -1 for an
// empty result.
func (p *promServer) query(q string) (float64, error) {
	resp, err := http.Get(p.api + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, body.Error)
	}
	if len(body.Data.Result) == 0 {
		return -1, nil
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// eventually polls q until it returns want (the next scrapes bring the last
// counts in) or 20s pass, and returns the last value.
func (p *promServer) eventually(t *testing.T, q string, want float64) (float64, bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var got float64
	for {
		v, err := p.query(q)
		if err != nil {
			t.Errorf("Prometheus: %v", err)
			return v, false
		}
		if got = v; got == want {
			return got, true
		}
		select {
		case <-deadline:
			return got, false
		case <-tick.C:
		}
	}
}

// waitUp waits until Prometheus scrapes n targets successfully.
func (p *promServer) waitUp(t *testing.T, n int) {
	t.Helper()
	if got, ok := p.eventually(t, "sum(up)", float64(n)); !ok {
		t.Fatalf("Prometheus scrapes %v targets successfully, want %d", got, n)
	}
}
