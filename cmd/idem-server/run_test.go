package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/testkit/syncbuf"
	"github.com/idemkit/idem/server"
)

// startRun runs the server in-process on a random port and returns its base
// URL, a function that stops it and returns run's error, and its log.
func startRun(t *testing.T, args ...string) (string, func() error, *syncbuf.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	logs := &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), outW, logs)
		outW.CloseWithError(err)
		done <- err
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("server did not start: %v; log:\n%s", err, logs)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	url := strings.TrimSpace(strings.TrimPrefix(line, "idem-server listening on "))
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { _ = stop() })
	return url, stop, logs
}

func doRequest(t *testing.T, method, url, key, body string, h http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if key != "" {
		req.Header.Set(server.HeaderKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// logLine is one request line of the JSON log.
type logLine struct {
	Msg        string  `json:"msg"`
	Method     string  `json:"method"`
	Path       string  `json:"path"`
	Status     int     `json:"status"`
	Key        string  `json:"key"`
	Replayed   bool    `json:"replayed"`
	DurationMS float64 `json:"duration_ms"`
}

func requestLines(t *testing.T, logs string) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if ll.Msg == "request" {
			out = append(out, ll)
		}
	}
	return out
}

func TestRunServes(t *testing.T) {
	t.Parallel()
	url, stop, logs := startRun(t, "-chaos")
	const body = `{"customer":"cus_1","amount":500,"currency":"EUR"}`
	auth := http.Header{"Authorization": {"Bearer t1"}}

	first, firstBody := doRequest(t, http.MethodPost, url+"/payments", "run-1", body, auth)
	replay, replayBody := doRequest(t, http.MethodPost, url+"/payments", "run-1", body, auth)
	if first.StatusCode != http.StatusCreated || replay.StatusCode != http.StatusCreated ||
		replay.Header.Get(server.HeaderReplayed) != "true" || !bytes.Equal(firstBody, replayBody) {
		t.Fatalf("first %d, replay %d %v: %s vs %s", first.StatusCode, replay.StatusCode, replay.Header, firstBody, replayBody)
	}
	if resp, b := doRequest(t, http.MethodGet, url+"/payments?customer=cus_1", "", "", auth); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"count":1`) {
		t.Errorf("GET /payments = %d %s", resp.StatusCode, b)
	}
	if resp, b := doRequest(t, http.MethodGet, url+"/healthz", "", "", nil); resp.StatusCode != http.StatusOK || string(b) != "ok\n" {
		t.Errorf("healthz = %d %q", resp.StatusCode, b)
	}
	// -chaos is on: a fault header is honoured.
	if resp, _ := doRequest(t, http.MethodPost, url+"/payments", "run-2", body, http.Header{"Chaos-Fail": {"503"}, "Chaos-Retry-After": {"4"}}); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "4" {
		t.Errorf("Chaos-Fail = %d %v", resp.StatusCode, resp.Header)
	}
	// A key the client chose to be huge and not ASCII is logged as server.LogKey cuts it.
	bad := "é" + strings.Repeat("k", 298)
	if resp, _ := doRequest(t, http.MethodPost, url+"/payments", bad, body, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a 300-byte key = %d, want 400", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}

	got := requestLines(t, logs.String())
	want := []logLine{
		{Method: "POST", Path: "/payments", Status: 201, Key: "run-1"},
		{Method: "POST", Path: "/payments", Status: 201, Key: "run-1", Replayed: true},
		{Method: "GET", Path: "/payments", Status: 200},
		{Method: "GET", Path: "/healthz", Status: 200},
		{Method: "POST", Path: "/payments", Status: 503, Key: "run-2"},
		{Method: "POST", Path: "/payments", Status: 400, Key: "??" + strings.Repeat("k", 62) + "...(300 bytes)"},
	}
	if len(got) != len(want) {
		t.Fatalf("request log lines:\n%+v\nwant %d", got, len(want))
	}
	for i := range want {
		g := got[i]
		if g.DurationMS < 0 {
			t.Errorf("line %d: duration %v", i, g.DurationMS)
		}
		g.Msg, g.DurationMS = "", 0
		if g != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, g, want[i])
		}
	}
}

func TestRunChaosHeadersOff(t *testing.T) {
	t.Parallel()
	url, stop, _ := startRun(t)
	resp, _ := doRequest(t, http.MethodPost, url+"/payments", "off-1", `{"customer":"c","amount":1,"currency":"EUR"}`, http.Header{"Chaos-Fail": {"503"}})
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("without -chaos, Chaos-Fail gave %d, want 201", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRunListenError(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"-addr", "127.0.0.1:-1"}, io.Discard, io.Discard)
	if err == nil || exitCode(err, io.Discard) != 1 {
		t.Errorf("run with a bad address = %v", err)
	}
}
