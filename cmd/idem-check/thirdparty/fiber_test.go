package thirdparty

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem-check/check"
)

var update = flag.Bool("update", false, "rewrite the Fiber sections of ../README.md from this run")

const readme = "../README.md"

// The markers around the generated sections of the README.
const (
	tableBegin    = "<!-- fiber-table:begin -->"
	tableEnd      = "<!-- fiber-table:end -->"
	evidenceBegin = "<!-- fiber-evidence:begin -->"
	evidenceEnd   = "<!-- fiber-evidence:end -->"
)

// fiberConfig is the run of the README: every row, against Fiber's app at
// base. Keys are a fixed sequence of UUIDs so that the evidence reads the
// same from one run to the next.
func fiberConfig(base string, lifetime time.Duration, rt http.RoundTripper) check.Config {
	var n atomic.Int64
	return check.Config{
		URL:            base + "/payments",
		Body:           []byte(`{"customer":"cus_check","amount":1999,"currency":"EUR"}`),
		Header:         http.Header{"Authorization": {"Bearer alice"}, "Content-Type": {"application/json"}},
		OtherPrincipal: http.Header{"Authorization": {"Bearer bob"}},
		Slow:           http.Header{"Slow": {"3s"}},
		Fail:           http.Header{"Fail": {"1"}},
		TTL:            lifetime,
		TTLMargin:      2 * time.Second, // Fiber's memory storage keeps time in whole seconds
		Effect: &check.EffectURL{URL: base + "/payments?customer=cus_check", Path: "count",
			Header: http.Header{"Authorization": {"Bearer alice"}}, Transport: rt},
		Chaos:     true,
		Transport: rt,
		NewKey: func() string {
			return fmt.Sprintf("00000000-0000-4000-8000-%012d", n.Add(1))
		},
	}
}

func runFiber(t *testing.T) (*check.Report, string) {
	t.Helper()
	const lifetime = 2 * time.Second
	app := FiberApp(lifetime)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	// Fiber's shutdown waits for every connection to close: the run's
	// keep-alive connections are closed first.
	rt := http.DefaultTransport.(*http.Transport).Clone()
	defer func() {
		rt.CloseIdleConnections()
		if err := app.ShutdownWithTimeout(10 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("the Fiber app did not stop")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := "http://" + ln.Addr().String()
	rep, err := check.Run(ctx, fiberConfig(base, lifetime, rt))
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
// requests and answers that show it.
// The run's random port is written as PORT, so that a rerun changes
// nothing but what the server did.
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
	return strings.ReplaceAll(b.String(), base, "http://127.0.0.1:PORT")
}

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
// Fiber's middleware. go test -run TestFiberVerdicts -update rewrites them
// (make idem-check-thirdparty).
func TestFiberVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every row against Fiber (about 20s)")
	}
	rep, base := runFiber(t)
	table, evidence := renderTable(rep), renderEvidence(rep, base)
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	if *update {
		doc = replaceSection(doc, tableBegin, tableEnd, table)
		doc = replaceSection(doc, evidenceBegin, evidenceEnd, evidence)
		if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	committed, ok := section(doc, tableBegin, tableEnd)
	if !ok {
		t.Fatalf("%s has no %s ... %s section", readme, tableBegin, tableEnd)
	}
	if committed != table {
		var text strings.Builder
		_ = rep.WriteText(&text, true)
		t.Errorf("the committed Fiber table differs from this run (make idem-check-thirdparty rewrites it)\ncommitted:\n%s\nthis run:\n%s\nreport:\n%s",
			committed, table, text.String())
	}
}
