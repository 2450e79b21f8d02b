package thirdparty

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	fiberv3 "github.com/gofiber/fiber/v3"

	"github.com/idemkit/idem/cmd/idem-check/check"
)

var update = flag.Bool("update", false, "rewrite the third-party sections of ../README.md from this run")

const readme = "../README.md"

// An implementation is a third party's idempotency layer around the
// payments handler, and how its run is configured.
type implementation struct {
	// name is the README markers' prefix: <!-- NAME-table:begin --> ...
	name string
	// start serves it and returns its base URL; the test stops it.
	start func(t *testing.T) string
	// ttl is the key lifetime it was configured with (0: it has none, and
	// keeps records for as long as the process lives); margin is what the
	// expiry row adds to it.
	ttl, margin time.Duration
}

// fiberLifetime is the key lifetime both Fiber apps are given: long enough
// for a retention window of two retries.
const fiberLifetime = 4 * time.Second

var implementations = []implementation{
	// Fiber's memory storage keeps time in whole seconds: a 2s margin.
	{name: "fiber", ttl: fiberLifetime, margin: 2 * time.Second, start: func(t *testing.T) string {
		app := FiberApp(fiberLifetime)
		return serve(t, func(ln net.Listener) error { return app.Listener(ln) }, func() error { return app.ShutdownWithTimeout(10 * time.Second) })
	}},
	{name: "fiberv3", ttl: fiberLifetime, margin: 2 * time.Second, start: func(t *testing.T) string {
		app := FiberV3App(fiberLifetime)
		return serve(t, func(ln net.Listener) error {
			return app.Listener(ln, fiberv3.ListenConfig{DisableStartupMessage: true})
		}, func() error { return app.ShutdownWithTimeout(10 * time.Second) })
	}},
	{name: "express", start: startExpress},
}

// serve runs a Fiber app on a loopback port until the test ends.
func serve(t *testing.T, listen func(net.Listener) error, shutdown func() error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- listen(ln) }()
	t.Cleanup(func() {
		if err := shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("the app did not stop")
		}
	})
	return "http://" + ln.Addr().String()
}

// startExpress installs express/ (npm ci, from its package-lock.json, into
// a directory of the test's) and runs its server with node. Without node or
// npm the test is skipped, saying so, or fails under IDEM_REQUIRE_SERVICES=1.
func startExpress(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s not found (%v): the express-idempotency table needs Node.js 20 and npm", tool, err)
			if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
				t.Fatal(msg + " (IDEM_REQUIRE_SERVICES=1)")
			}
			t.Skip(msg + "; set IDEM_REQUIRE_SERVICES=1 to fail instead")
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "server.js"} {
		data, err := os.ReadFile(filepath.Join("express", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of express/: %v\n%s", err, out)
	}
	cmd := exec.Command("node", "server.js")
	cmd.Dir = dir
	// production: Express's error pages carry no stack trace (no paths of
	// this machine in the evidence).
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls, exited := make(chan string, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(sc.Text()); u != "" {
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
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("node server.js still running 10s after SIGTERM; killed")
		}
	})
	select {
	case u := <-urls:
		return u
	case err := <-exited:
		t.Fatalf("node server.js exited before listening: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("node server.js did not say where it listens in 30s\n%s", stderr.String())
	}
	return ""
}

// config is the run of the README: every row, against the implementation at
// base, one customer per operation. Keys are a fixed sequence of UUIDs, and
// the operations' ids come from them, so that the evidence reads the same
// from one run to the next.
func (impl implementation) config(base string, rt http.RoundTripper) check.Config {
	var n atomic.Int64
	cfg := check.Config{
		URL:            base + "/payments",
		Body:           []byte(`{"customer":"cus_{{id}}","amount":1999,"currency":"EUR"}`),
		Header:         http.Header{"Authorization": {"Bearer alice"}, "Content-Type": {"application/json"}},
		OtherPrincipal: http.Header{"Authorization": {"Bearer bob"}},
		Slow:           http.Header{"Slow": {"3s"}},
		Fail:           http.Header{"Fail": {"1"}},
		TTL:            impl.ttl,
		TTLMargin:      impl.margin,
		ReplayAfter:    2 * time.Second,
		Effect: &check.EffectURL{URL: base + "/payments?customer=cus_{{id}}", Path: "count",
			Header: http.Header{"Authorization": {"Bearer alice"}}, Transport: rt},
		Chaos:     true,
		Transport: rt,
		NewKey: func() string {
			return fmt.Sprintf("00000000-0000-4000-8000-%012d", n.Add(1))
		},
	}
	return cfg
}

func (impl implementation) run(t *testing.T) (*check.Report, string) {
	t.Helper()
	base := impl.start(t)
	// The apps' shutdown waits for every connection to close: the run's
	// keep-alive connections are closed first (cleanups run last first).
	rt := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := check.Run(ctx, impl.config(base, rt))
	if err != nil {
		t.Fatal(err)
	}
	return rep, base
}

// renderTable is the verdict table of the README.
func renderTable(rep *check.Report) string {
	var b strings.Builder
	b.WriteString("| check | verdict | expected |\n|---|---|---|\n")
	for _, row := range rep.Rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", row.ID, row.Verdict, mdEscape(row.Expected))
	}
	return b.String()
}

// renderEvidence shows, for every FAIL and WARN, what came back and the
// requests and answers that show it. The run's random port is written as
// PORT, so that a rerun changes nothing but what the server did.
func renderEvidence(rep *check.Report, base string) string {
	var b strings.Builder
	for _, row := range rep.Rows {
		if row.Verdict != check.Fail && row.Verdict != check.Warn {
			continue
		}
		fmt.Fprintf(&b, "#### %s `%s`\n\n%s. Got: %s\n\n", row.Verdict, row.ID, row.Title, mdEscape(row.Got))
		b.WriteString("```\n")
		for i, ex := range row.Evidence {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%s\n\n=> %s\n", ex.Request, strings.ReplaceAll(ex.Response, "\n", "\n   "))
		}
		b.WriteString("```\n\n")
	}
	return volatile.ReplaceAllString(strings.ReplaceAll(b.String(), base, "http://127.0.0.1:PORT"), "$1…")
}

// volatile is what changes from one run to the next in an answer although
// the server did the same: ETags of Express and dates.
var volatile = regexp.MustCompile(`(Etag: W/"[0-9a-f]+-)[^"]*|(\d{2}:\d{2}:\d{2}) GMT`)

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// section returns the text between begin and end in doc.
func section(doc, begin, end string) (string, bool) {
	_, rest, ok := strings.Cut(doc, begin+"\n")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, end)
	return body, ok
}

func replaceSection(doc, begin, end, body string) string {
	head, rest, _ := strings.Cut(doc, begin+"\n")
	_, tail, _ := strings.Cut(rest, end)
	return head + begin + "\n" + body + end + tail
}

// The verdicts committed in the README are those of a fresh run against
// each implementation. go test -run TestThirdPartyVerdicts -update rewrites
// them (make idem-check-thirdparty).
func TestThirdPartyVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every row against three implementations (about 40s)")
	}
	type result struct{ table, evidence string }
	results := make([]result, len(implementations))
	t.Run("run", func(t *testing.T) {
		for i, impl := range implementations {
			t.Run(impl.name, func(t *testing.T) {
				t.Parallel()
				rep, base := impl.run(t)
				results[i] = result{renderTable(rep), renderEvidence(rep, base)}
				if *update {
					return
				}
				data, err := os.ReadFile(readme)
				if err != nil {
					t.Fatal(err)
				}
				committed, ok := section(string(data), marker(impl.name, "table", "begin"), marker(impl.name, "table", "end"))
				if !ok {
					t.Fatalf("%s has no %s ... %s section", readme, marker(impl.name, "table", "begin"), marker(impl.name, "table", "end"))
				}
				if committed != results[i].table {
					var text strings.Builder
					_ = rep.WriteText(&text, true)
					t.Errorf("the committed %s table differs from this run (make idem-check-thirdparty rewrites it)\ncommitted:\n%s\nthis run:\n%s\nreport:\n%s",
						impl.name, committed, results[i].table, text.String())
				}
			})
		}
	})
	if !*update || t.Failed() {
		return
	}
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for i, impl := range implementations {
		if results[i].table == "" {
			t.Fatalf("%s did not run: nothing rewritten", impl.name)
		}
		doc = replaceSection(doc, marker(impl.name, "table", "begin"), marker(impl.name, "table", "end"), results[i].table)
		doc = replaceSection(doc, marker(impl.name, "evidence", "begin"), marker(impl.name, "evidence", "end"), results[i].evidence)
	}
	if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

func marker(name, part, edge string) string {
	return fmt.Sprintf("<!-- %s-%s:%s -->", name, part, edge)
}
