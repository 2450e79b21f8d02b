package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
)

// Bad gateway configurations are usage errors (exit 2) whose message names
// the flag.
func TestGatewayFlagsRefused(t *testing.T) {
	t.Parallel()
	up := []string{"-upstream", "http://127.0.0.1:9000"}
	ca := caFiles(t)
	tlsUp := func(file string) []string {
		return []string{"-upstream", "https://127.0.0.1:9000", "-upstream-ca", ca[file]}
	}
	bad := []struct {
		name string
		args []string
		flag string // the message names it
	}{
		{"upstream that does not parse", []string{"-upstream", "http://[::1"}, "-upstream"},
		{"upstream without a scheme", []string{"-upstream", "127.0.0.1:9000"}, "-upstream"},
		{"upstream ftp", []string{"-upstream", "ftp://example.com"}, "-upstream"},
		{"upstream without a host", []string{"-upstream", "http://"}, "-upstream"},
		{"upstream with a query", []string{"-upstream", "http://a:1/?x=1"}, "-upstream"},
		{"pattern without a method", append(up, "-protect", "/payments"), "-protect"},
		{"pattern without a path", append(up, "-protect", "POST"), "-protect"},
		{"pattern that does not parse", append(up, "-protect", "POST /a/{x"), "-protect"},
		{"patterns that conflict", append(up, "-protect", "POST /a/{x}/b,POST /a/b/{y}"), "-protect"},
		{"empty pattern", append(up, "-protect", "POST /a,,POST /b"), "-protect"},
		{"demo-only flag with -upstream", append(up, "-ledger-postgres-url", "postgres://x"), "-ledger-postgres-url"},
		{"gateway flag without -upstream", []string{"-protect", "POST /a"}, "-protect"},
		{"scope header without -upstream", []string{"-scope-header", "X-Tenant"}, "-scope-header"},
		{"bad scope header", append(up, "-scope-header", "X Tenant"), "-scope-header"},
		{"unknown fingerprint", append(up, "-fingerprint", "sha1"), "-fingerprint"},
		{"negative wait", append(up, "-wait", "-1s"), "-wait"},
		{"bad forward key header", append(up, "-forward-key-header", ""), "-forward-key-header"},
		{"dedupes without the key", append(up, "-upstream-dedupes", "-forward-key=false"), "-upstream-dedupes"},
		{"upstream timeout too long", append(up, "-upstream-timeout", "30s"), "-upstream-timeout"},
		{"upstream timeout zero", append(up, "-upstream-timeout", "0s"), "-upstream-timeout"},
		{"stored header never stored", append(up, "-stored-headers", "X-A,Set-Cookie"), "-stored-headers"},
		{"negative response bytes", append(up, "-max-response-bytes", "-1"), "-max-response-bytes"},
		{"CA file without -upstream", []string{"-upstream-ca", ca["good"]}, "-upstream-ca"},
		{"CA file with an http upstream", append(up, "-upstream-ca", ca["good"]), "-upstream-ca"},
		{"CA file missing", tlsUp("missing"), "-upstream-ca"},
		{"CA file empty", tlsUp("empty"), "-upstream-ca"},
		{"CA file not PEM", tlsUp("text"), "-upstream-ca"},
		{"CA file holding a key", tlsUp("key"), "-upstream-ca"},
		{"CA file with a broken certificate", tlsUp("broken"), "-upstream-ca"},
		{"CA file with text after its certificate", tlsUp("trailing"), "-upstream-ca"},
		{"CA file too large", tlsUp("huge"), "-upstream-ca"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tt.args, io.Discard)
			if !errors.Is(err, errUsage) || exitCode(err, io.Discard) != 2 {
				t.Fatalf("parseFlags(%q) = %v, want a usage error (exit 2)", tt.args, err)
			}
			if !strings.Contains(err.Error(), tt.flag) {
				t.Errorf("%v: does not name %s", err, tt.flag)
			}
		})
	}
}

func TestGatewayFlagsAccepted(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-upstream", "https://api.internal:8443/v1", "-protect", "POST /pay,PUT /items/{id}",
		"-protect", "DELETE /items/{id}", "-scope-header", "X-Tenant", "-fingerprint", "canonical-json",
		"-stored-headers", "X-Request-Id, Content-Encoding", "-wait", "0s", "-forward-key-header", "X-Key",
		"-upstream-dedupes", "-upstream-timeout", "5s", "-max-response-bytes", "2048", "-store", "redis"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	g := c.gateway
	if g.upstream.String() != "https://api.internal:8443/v1" || !slices.Equal(g.protect, patternList{"POST /pay", "PUT /items/{id}", "DELETE /items/{id}"}) ||
		g.scopeHeader != "X-Tenant" || g.fingerprint != "canonical-json" || g.wait != 0 || g.forwardKeyHeader != "X-Key" ||
		!g.forwardKey || !g.upstreamDedupes || g.upstreamTimeout != 5*time.Second || g.maxResponseBytes != 2048 {
		t.Errorf("parsed %+v", g)
	}
	c, err = parseFlags([]string{"-upstream", "http://127.0.0.1:3000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.gateway.protect, patternList(gateway.DefaultProtect)) || c.gateway.upstreamTimeout != defaultUpstreamTimeout ||
		c.gateway.upstreamRoots != nil {
		t.Errorf("defaults: %+v", c.gateway)
	}
	c, err = parseFlags([]string{"-upstream", "https://127.0.0.1:3000", "-upstream-ca", caFiles(t)["good"]}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.gateway.upstreamRoots == nil {
		t.Error("-upstream-ca: no roots")
	}
}

// caFiles writes -upstream-ca files into a directory of t's: good (two
// certificates), and one for each way of being wrong; missing is not written.
func caFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: testCert(t).Raw})
	files := map[string][]byte{
		"good":     append(append([]byte{}, cert...), cert...),
		"empty":    nil,
		"text":     []byte("not a certificate\n"),
		"key":      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
		"broken":   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}),
		"trailing": append(append([]byte{}, cert...), "junk\n"...),
		"huge":     bytes.Repeat(cert, maxRootsFile/len(cert)+1),
	}
	paths := map[string]string{"missing": filepath.Join(dir, "missing.pem")}
	for name, data := range files {
		paths[name] = filepath.Join(dir, name+".pem")
		if err := os.WriteFile(paths[name], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// testCert returns the certificate of httptest's TLS servers (for 127.0.0.1,
// ::1 and example.com, its own issuer).
func testCert(t *testing.T) *x509.Certificate {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return srv.Certificate()
}

// The binary exits 2 on a bad -upstream, naming it.
func TestBinaryGatewayBadUpstream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("go build: %v", err)
	}
	out, err := exec.Command(bin, "-upstream", "http://[::1").CombinedOutput()
	if code := exitStatus(err); code != 2 || !strings.Contains(string(out), "-upstream") {
		t.Errorf("exit %d, output %q; want 2 and a message naming -upstream", code, out)
	}
}

// docs/gateway.md's table names every gateway flag.
func TestGatewayDocNamesEveryFlag(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	registerGatewayFlags(fs, &gatewayConfig{})
	fs.VisitAll(func(f *flag.Flag) {
		// In code, whole: "`-wait`", "`-upstream URL`", "`-forward-key=false`".
		if !regexp.MustCompile("`-" + regexp.QuoteMeta(f.Name) + "[` =]").Match(doc) {
			t.Errorf("docs/gateway.md does not name -%s", f.Name)
		}
	})
}
