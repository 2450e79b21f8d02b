package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testkit/buildtest"
	"github.com/idemkit/idem/internal/testkit/syncbuf"
)

// bins holds the binaries the tests build; TestMain removes them.
var bins = buildtest.New("idem-e2e-bin-")

// buildServer builds cmd/idem-server once per test run, through the go.work
// workspace (the command is a module of its own).
func buildServer() (string, error) {
	return bins.Build("idem-server", filepath.Join("..", "cmd", "idem-server"))
}

// serverProcess is a running idem-server binary.
type serverProcess struct {
	cmd    *exec.Cmd
	URL    string // http://127.0.0.1:port
	stderr *syncbuf.Buffer
}

// skipShort skips a test that builds and runs the binary under -short.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the idem-server binary")
	}
}

// startServer starts idem-server with args (-addr 127.0.0.1:0 is added) and
// stops it when the test ends. It returns once the server listens.
func startServer(t *testing.T, args ...string) *serverProcess {
	t.Helper()
	skipShort(t)
	bin, err := buildServer()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	p := &serverProcess{cmd: cmd, stderr: &syncbuf.Buffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
	})
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r)
		_ = cmd.Wait()
		close(waited)
	}()
	select {
	case line := <-lines:
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "idem-server listening on ")
		if !ok {
			t.Fatalf("idem-server %s: no listening line (got %q); stderr:\n%s", strings.Join(args, " "), line, p.stderr.Tail(20))
		}
		p.URL = u
	case <-time.After(30 * time.Second):
		t.Fatalf("idem-server %s: not listening after 30s; stderr:\n%s", strings.Join(args, " "), p.stderr.Tail(20))
	}
	return p
}

// payments returns how many payments the server's ledger holds for customer.
func (p *serverProcess) payments(t *testing.T, customer string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/payments?customer="+url.QueryEscape(customer), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /payments: %v", err)
	}
	defer resp.Body.Close()
	var list struct {
		Count *int `json:"count"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	if err == nil && list.Count == nil {
		err = errors.New(`no "count" in the body`)
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /payments?customer=%s: status %d, %v", customer, resp.StatusCode, err)
	}
	return *list.Count
}

// logOf returns the server's log lines that mention s (an idempotency key).
func (p *serverProcess) logOf(s string) string {
	var out []string
	for line := range strings.Lines(p.stderr.String()) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}
