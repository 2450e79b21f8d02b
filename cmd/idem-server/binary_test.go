package main

import (
	"bufio"
	"errors"
	"github.com/idemkit/idem/internal/testkit/syncbuf"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// buildBinary builds the command once per test run.
func buildBinary() (string, error) { return bins.Build("idem-server", ".") }

// process is a started binary.
type process struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncbuf.Buffer
}

func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("go build: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
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
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no listening line: %v; stderr:\n%s", err, stderr)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return &process{cmd: cmd, url: strings.TrimSpace(strings.TrimPrefix(line, "idem-server listening on ")), stderr: stderr}
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestBinarySIGTERM(t *testing.T) {
	t.Parallel()
	p := startBinary(t)
	resp, err := http.Get(p.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(p.cmd.Wait()); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no clean stop logged:\n%s", p.stderr)
	}
}

// TestBinaryChaosCrash: Chaos-Crash really ends the process (status 3) after
// the business write, and the client sees the connection close.
func TestBinaryChaosCrash(t *testing.T) {
	t.Parallel()
	p := startBinary(t, "-chaos")
	req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(`{"customer":"c","amount":1,"currency":"EUR"}`))
	req.Header.Set("Idempotency-Key", "crash-1")
	req.Header.Set("Chaos-Crash", "after-write")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("crash answered %d", resp.StatusCode)
	}
	if code := exitStatus(p.cmd.Wait()); code != crashExitCode {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, crashExitCode, p.stderr)
	}
}

func TestBinaryBadFlags(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("go build: %v", err)
	}
	out, err := exec.Command(bin, "-chaos-fail-rate", "3").CombinedOutput()
	if code := exitStatus(err); code != 2 || !strings.Contains(string(out), "-chaos-fail-rate") {
		t.Errorf("exit %d, output %q; want 2 and a message naming the flag", code, out)
	}
}
