package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
	"github.com/idemkit/idem/server"
)

// gatewayConfig is the gateway mode's part of the command line (-upstream
// and the flags that only it reads).
type gatewayConfig struct {
	upstreamRaw      string
	upstream         *url.URL // parsed -upstream; nil in the demo mode
	upstreamCA       string
	upstreamRoots    *x509.CertPool // read from -upstream-ca; nil: the system's
	protect          patternList
	scopeHeader      string
	fingerprint      string
	storedHeaders    string
	wait             time.Duration
	forwardKey       bool
	forwardKeyHeader string
	upstreamDedupes  bool
	upstreamTimeout  time.Duration
	maxResponseBytes int64
}

// Defaults of the gateway's flags.
const (
	// defaultUpstreamTimeout bounds each protected request's call to the
	// upstream, answer included; it must fit in protectedRequestTime.
	defaultUpstreamTimeout = 20 * time.Second
	// protectedRequestTime is what a protected request may take in all: the
	// server's write time-out less the longest chaos delay (see run). The
	// upstream's time-out must be shorter, leaving time to claim the key
	// before it and to record the answer after it.
	protectedRequestTime = 30 * time.Second
)

// fingerprints are the values of -fingerprint.
var fingerprints = map[string]server.Fingerprint{
	"exact":          server.ExactBody,
	"canonical-json": server.CanonicalJSON,
}

// registerGatewayFlags adds the gateway's flags to fs, filling g.
func registerGatewayFlags(fs *flag.FlagSet, g *gatewayConfig) {
	fs.StringVar(&g.upstreamRaw, "upstream", "",
		"serve as an idempotency gateway in front of this API (http or https URL) instead of the demo")
	fs.StringVar(&g.upstreamCA, "upstream-ca", "",
		"a PEM file of the CA certificates an https upstream's certificate is checked against, in place of the system's")
	fs.Var(&g.protect, "protect", "requests the gateway protects: METHOD /path patterns in net/http ServeMux syntax, "+
		`comma-separated or repeated (default "POST /,PATCH /": every POST and PATCH)`)
	fs.StringVar(&g.scopeHeader, "scope-header", "",
		"the request header whose value scopes the keys (default: the Authorization header)")
	fs.StringVar(&g.fingerprint, "fingerprint", "exact",
		"how a request's content is identified: exact (method, path and body bytes) or canonical-json")
	fs.StringVar(&g.storedHeaders, "stored-headers", "",
		"comma-separated response headers recorded and replayed besides Content-Type, Location and ETag")
	fs.DurationVar(&g.wait, "wait", server.DefaultInProgressWait,
		"how long a duplicate waits for the first request with its key (0: 409 at once)")
	fs.BoolVar(&g.forwardKey, "forward-key", true, "forward the Idempotency-Key to the upstream (false: remove it)")
	fs.StringVar(&g.forwardKeyHeader, "forward-key-header", server.HeaderKey,
		"the header that carries the forwarded key to the upstream")
	fs.BoolVar(&g.upstreamDedupes, "upstream-dedupes", false,
		"the upstream deduplicates by the forwarded key: a retry after a lost answer or a crash may forward again")
	fs.DurationVar(&g.upstreamTimeout, "upstream-timeout", defaultUpstreamTimeout,
		"how long a protected request's call to the upstream may take, answer included (less than -request-timeout and 30s)")
	fs.Int64Var(&g.maxResponseBytes, "max-response-bytes", server.DefaultMaxResponseBytes,
		"the largest upstream answer to a protected request that is recorded")
}

// demoOnlyFlags are the flags only the demo reads: given with -upstream they
// would be silently ignored.
var demoOnlyFlags = map[string]bool{
	"ledger-postgres-url": true,
	"max-payments":        true,
}

// enabled reports whether the command line asks for the gateway.
func (g *gatewayConfig) enabled() bool { return g.upstreamRaw != "" }

// check validates the gateway's flags: a demo-only flag with -upstream, a
// gateway flag without it, and each value. It parses -upstream and fills the
// default -protect.
func (g *gatewayConfig) check(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil:
		case g.enabled() && demoOnlyFlags[f.Name]:
			err = usageErr("-%s is for the demo; it does nothing with -upstream", f.Name)
		case !g.enabled() && isGatewayFlag(f.Name):
			err = usageErr("-%s is a gateway flag: it needs -upstream", f.Name)
		}
	})
	if err != nil || !g.enabled() {
		return err
	}
	if g.upstream, err = parseUpstream(g.upstreamRaw); err != nil {
		return err
	}
	if g.upstreamCA != "" {
		if g.upstream.Scheme != "https" {
			return usageErr("-upstream-ca needs an https:// -upstream (it is %s)", g.upstream.Redacted())
		}
		if g.upstreamRoots, err = readRoots(g.upstreamCA); err != nil {
			return usageErr("-upstream-ca %v", err)
		}
	}
	if len(g.protect) == 0 {
		g.protect = append(g.protect, gateway.DefaultProtect...)
	}
	if err := gateway.CheckPatterns(g.protect); err != nil {
		return usageErr("-protect %v", err)
	}
	return g.validate()
}

// isGatewayFlag reports whether name is one of registerGatewayFlags' flags
// other than -upstream.
func isGatewayFlag(name string) bool {
	if name == "upstream" {
		return false
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	registerGatewayFlags(fs, &gatewayConfig{})
	return fs.Lookup(name) != nil
}

func (g *gatewayConfig) validate() error {
	switch {
	case g.scopeHeader != "" && !gateway.IsToken(g.scopeHeader):
		return usageErr("-scope-header %q: want a header name", g.scopeHeader)
	case fingerprints[g.fingerprint] == nil:
		return usageErr("-fingerprint %q: want exact or canonical-json", g.fingerprint)
	case g.wait < 0:
		return usageErr("-wait %v: must be 0 or more", g.wait)
	case !gateway.IsToken(g.forwardKeyHeader):
		return usageErr("-forward-key-header %q: want a header name", g.forwardKeyHeader)
	case g.upstreamDedupes && !g.forwardKey:
		return usageErr("-upstream-dedupes needs -forward-key: an upstream cannot deduplicate by a key it never sees")
	case g.upstreamTimeout <= 0 || g.upstreamTimeout >= protectedRequestTime:
		return usageErr("-upstream-timeout %v: must be positive and less than %v, a protected request's time in all",
			g.upstreamTimeout, protectedRequestTime)
	case g.maxResponseBytes < 0:
		return usageErr("-max-response-bytes %d: must be 0 or more", g.maxResponseBytes)
	}
	if _, err := g.storedHeaderOption(); err != nil {
		return err
	}
	return nil
}

// parseUpstream parses -upstream: an absolute http or https URL with a host,
// no query or fragment (the request's own are forwarded).
func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, usageErr("-upstream %q: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, usageErr("-upstream %q: want an http:// or https:// URL", raw)
	case u.Host == "":
		return nil, usageErr("-upstream %q: want a host", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, usageErr("-upstream %q: want no user, query or fragment", raw)
	}
	return u, nil
}

// storedHeaderOption returns -stored-headers as a middleware option, or the
// usage error naming the header the middleware refuses.
func (g *gatewayConfig) storedHeaderOption() (opt server.Option, err error) {
	var names []string
	for n := range strings.SplitSeq(g.storedHeaders, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	defer func() {
		if v := recover(); v != nil { // server.WithStoredHeaders names what it refuses
			opt, err = nil, usageErr("-stored-headers: %v", v)
		}
	}()
	return server.WithStoredHeaders(names...), nil
}

// patternList is -protect: the ServeMux patterns of the protected requests,
// each with a method.
type patternList []string

func (p *patternList) String() string { return strings.Join(*p, ",") }

// Set adds the comma-separated patterns of one -protect.
func (p *patternList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			return fmt.Errorf("empty pattern in %q", v)
		}
		*p = append(*p, s)
	}
	return nil
}

// maxRootsFile bounds the -upstream-ca file: a bundle of every public CA is
// about 200 KiB.
const maxRootsFile = 4 << 20

// readRoots reads the PEM file at path into a pool. Every block in it must
// be a certificate that parses (a private key or a typo is refused rather
// than skipped), and there must be at least one.
func readRoots(path string) (*x509.CertPool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRootsFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxRootsFile {
		return nil, fmt.Errorf("%s: larger than %d bytes: want a PEM file of CA certificates", path, maxRootsFile)
	}
	pool := x509.NewCertPool()
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			switch {
			case n == 1:
				return nil, fmt.Errorf("%s: no PEM certificate in it: want a PEM file of CA certificates", path)
			case len(bytes.TrimSpace(data)) > 0:
				return nil, fmt.Errorf("%s: not PEM after certificate %d: want a PEM file of CA certificates", path, n-1)
			}
			return pool, nil
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: block %d is a %s: want CERTIFICATE blocks only", path, n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, n, err)
		}
		pool.AddCert(cert)
	}
}
