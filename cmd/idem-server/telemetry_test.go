package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// scrape returns the server's /metrics text.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the Prometheus text format", ct)
	}
	return string(b)
}

// sample returns the value of the first sample of name whose labels include
// every one of labels (`k="v"`), and whether there is one.
func sample(text, name string, labels ...string) (string, bool) {
next:
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		return line[strings.LastIndexByte(line, ' ')+1:], true
	}
	return "", false
}

// TestRunMetrics: /metrics, beside /healthz, serves the middleware's counts
// in the Prometheus text format (a replay and a 422 counted by route and
// store, never by key), the Go runtime's, and the HTTP server's.
func TestRunMetrics(t *testing.T) {
	t.Parallel()
	url, _, _ := startRun(t)
	key := unique("metrics-key")
	body := `{"customer":"m","amount":1,"currency":"EUR"}`
	doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
	doRequest(t, http.MethodPost, url+"/payments", key, body, nil)
	doRequest(t, http.MethodPost, url+"/payments", key, strings.Replace(body, `1,`, `2,`, 1), nil)
	text := scrape(t, url)
	for _, tc := range []struct {
		outcome, want string
	}{{"executed", "1"}, {"replayed", "1"}, {"mismatch", "1"}} {
		got, ok := sample(text, "idem_server_requests_total", `idem_outcome="`+tc.outcome+`"`, `http_route="/payments"`, `idem_store="memory"`)
		if !ok || got != tc.want {
			t.Errorf("idem_server_requests_total{idem_outcome=%q} = %q (found %v), want %s", tc.outcome, got, ok, tc.want)
		}
	}
	if got, ok := sample(text, "idem_server_wait_duration_seconds_count", `idem_wait_end="replayed"`); !ok || got != "1" {
		t.Errorf("waits ending in a replay: %q, want 1", got)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "idem_server_handler_duration_seconds_bucket",
		"http_server_request_duration_seconds_count"} {
		if _, ok := sample(text, name); !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}
	if strings.Contains(text, key) {
		t.Errorf("the key %s is in /metrics", key)
	}
}

// TestRunPoolMetrics: with a durable store, /metrics has the pool's
// connections (db.client.connection.count by state).
func TestRunPoolMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		want []string // db_client_connection_pool_name values
	}{
		{"postgres", func(t *testing.T) []string { return []string{"-store", "postgres", "-postgres-url", postgresURL(t)} }, []string{"postgres"}},
		{"redis+postgres ledger", func(t *testing.T) []string {
			return []string{"-store", "redis", "-redis-addr", redisAddr(t), "-ledger-postgres-url", postgresURL(t)}
		}, []string{"redis", "postgres"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, _, _ := startRun(t, tc.args(t)...)
			doRequest(t, http.MethodPost, url+"/payments", unique("pool-key"), `{"customer":"p","amount":1,"currency":"EUR"}`, nil)
			text := scrape(t, url)
			for _, pool := range tc.want {
				if _, ok := sample(text, "db_client_connection_count", `db_client_connection_pool_name="`+pool+`"`, `db_client_connection_state="idle"`); !ok {
					t.Errorf("no idle connection count of pool %s in /metrics", pool)
				}
				if _, ok := sample(text, "db_client_connection_timeouts_total", `db_client_connection_pool_name="`+pool+`"`); !ok {
					t.Errorf("no connection timeouts of pool %s in /metrics", pool)
				}
			}
			if _, ok := sample(text, "db_client_connection_max", `db_client_connection_pool_name="postgres"`); !ok {
				t.Errorf("no db_client_connection_max of the PostgreSQL pool")
			}
		})
	}
}

func TestTracesFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env     map[string]string
		want    bool
		wantErr bool
	}{
		{nil, false, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, false, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, true, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, false, true},
	} {
		got, err := tracesFromEnv(func(k string) string { return tc.env[k] })
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("tracesFromEnv(%v) = %v, %v; want %v, error %v", tc.env, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
			t.Errorf("error %q does not name the variable", err)
		}
	}
}

// TestTelemetryOTLP: with an OTLP endpoint in the environment, the request's
// server span reaches an OTLP/HTTP receiver when the server stops. Not
// parallel: it sets the environment the SDK reads.
func TestTelemetryOTLP(t *testing.T) {
	got := make(chan string, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.URL.Path + " " + string(b)
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	t.Setenv("OTEL_SERVICE_NAME", "idem-test")
	tel, err := newTelemetry(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := tel.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }), "/metrics")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/payments", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case req := <-got:
		if !strings.HasPrefix(req, "/v1/traces ") || !strings.Contains(req, "idem-test") {
			t.Errorf("the receiver got %.200q, want the traces of service idem-test", req)
		}
	case <-ctx.Done():
		t.Fatal("no traces reached the OTLP receiver")
	}
}
