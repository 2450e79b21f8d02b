// Package gateway is idem-server's -upstream mode: an idempotency gateway, a
// reverse proxy that applies server.Middleware's contract in front of an API
// it does not own. cmd/idem-server builds it from its flags; bench measures
// it. docs/gateway.md in the repository says how to run it, and
// docs/CONTRACT.md what each upstream answer means for the key.
//
// It is application code, not library API: it lives in the command's module,
// beside the command that ships it, so that the root module's download does
// not carry it, and outside an internal/ directory only so that bench can
// measure it in-process. Nothing outside this repository should import it: it
// changes with the command, with no promise of compatibility.
package gateway

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/demo/cause"
	"github.com/idemkit/idem/internal/demo/health"
	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// Paths the gateway answers itself, under a prefix of its own so that every
// other path reaches the upstream (idem-server's telemetry serves the
// metrics at MetricsPath).
const (
	Prefix      = "/_idem/"
	LivezPath   = Prefix + "livez"
	ReadyzPath  = Prefix + "readyz"
	MetricsPath = Prefix + "metrics"
)

// DefaultProtect is what a Config with no Protect protects: every POST and
// PATCH, as the middleware does by default.
var DefaultProtect = []string{"POST /", "PATCH /"}

// Config is a gateway's configuration; idem-server fills it from its flags,
// which docs/gateway.md lists.
type Config struct {
	// Upstream is the API behind the gateway: an absolute http or https URL.
	Upstream *url.URL
	// UpstreamRootCAs are the certificate authorities an https upstream's
	// certificate is checked against, in place of the system's; nil means
	// the system's.
	UpstreamRootCAs *x509.CertPool
	// Protect lists the protected requests as net/http ServeMux patterns, each
	// with a method ("POST /orders"); nil means DefaultProtect.
	Protect []string
	// ScopeHeader names the header whose value scopes the keys; empty means
	// the Authorization header (server.BearerScope).
	ScopeHeader string
	// Scope, when set, is the scope function in place of ScopeHeader's
	// (idem-server's, which authenticates callers with -tokens).
	Scope func(*http.Request) (string, error)
	// Middleware are the options of the protected requests' middleware (TTL,
	// lock TTL, fingerprint, stored headers, wait, telemetry); the gateway
	// adds its methods, its scope and the response limit after them.
	Middleware []server.Option
	// ForwardKey sends the key, parsed, to the upstream in ForwardKeyHeader
	// (server.HeaderKey when empty); false removes it.
	ForwardKey       bool
	ForwardKeyHeader string
	// UpstreamDedupes says the upstream deduplicates by the forwarded key: no
	// durable mark, and a lost answer releases the key.
	UpstreamDedupes bool
	// UpstreamTimeout bounds each protected request's call to the upstream,
	// answer included. Required.
	UpstreamTimeout time.Duration
	// MaxResponseBytes is the largest upstream answer to a protected request
	// that is recorded (server.DefaultMaxResponseBytes when 0).
	MaxResponseBytes int64
	// Chaos applies the Chaos-* faults to the protected requests (nil: none);
	// with ChaosHeaders, those headers are the gateway's and are not
	// forwarded.
	Chaos        *chaos.Injector
	ChaosHeaders bool
}

// maxProblemBytes bounds the gateway's own problem answers, which are
// recorded however small MaxResponseBytes is.
const maxProblemBytes = 4 << 10

// A Gateway routes each request: one that matches a Protect pattern goes
// through server.Middleware to the forwarder (see forwarder); every other
// request is passed through to the upstream untouched, by a plain
// httputil.ReverseProxy.
type Gateway struct {
	// patterns holds the Protect patterns, for matching only (its handlers
	// are never called: ServeMux would clean paths and redirect); methods is
	// each pattern's method.
	patterns  *http.ServeMux
	methods   map[string]string
	protected http.Handler
	pass      http.Handler
	// ready answers the readiness check from the store alone: the
	// upstream is not asked, its readiness is its own.
	ready http.Handler
}

// New returns the gateway cfg describes over store. It returns an error for
// a pattern that CheckPatterns refuses, and panics on an impossible
// middleware option, as server.Middleware does.
func New(cfg Config, store server.Store) (*Gateway, error) {
	return newGateway(cfg, store, nil)
}

// newGateway is New with the dialer of the protected requests' connections
// to the upstream (nil: net/http's default).
func newGateway(cfg Config, store server.Store, dial dialFunc) (*Gateway, error) {
	if cfg.Upstream == nil || cfg.UpstreamTimeout <= 0 {
		return nil, errors.New("gateway: Config.Upstream and Config.UpstreamTimeout are required")
	}
	if len(cfg.Protect) == 0 {
		cfg.Protect = DefaultProtect
	}
	if cfg.ForwardKeyHeader == "" {
		cfg.ForwardKeyHeader = server.HeaderKey
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = server.DefaultMaxResponseBytes
	}
	if cfg.Chaos == nil {
		cfg.Chaos = chaos.New(chaos.WithHeaders(false))
	}
	patterns, methods, err := mux(cfg.Protect)
	if err != nil {
		return nil, err
	}
	var protectedMethods []string
	seen := map[string]bool{}
	for _, p := range cfg.Protect {
		if m := methods[p]; !seen[m] {
			seen[m] = true
			protectedMethods = append(protectedMethods, m)
		}
	}
	scope := cfg.Scope
	if scope == nil {
		scope = Scope(cfg.ScopeHeader)
	}
	opts := append(cfg.Middleware[:len(cfg.Middleware):len(cfg.Middleware)],
		server.WithMethods(protectedMethods...),
		server.WithScope(scope),
		// The forwarder holds upstream answers to MaxResponseBytes; the
		// capture has room for its own problem answers besides.
		server.WithMaxResponseBytes(max(cfg.MaxResponseBytes, maxProblemBytes)),
	)
	return &Gateway{
		patterns:  patterns,
		methods:   methods,
		protected: cfg.Chaos.Wrap(server.Middleware(store, opts...)(newForwarder(cfg, dial))),
		pass:      newPassThrough(cfg.Upstream, cfg.UpstreamRootCAs),
		ready:     health.Ready(store),
	}, nil
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == LivezPath && r.Method == http.MethodGet:
		health.Live(w, r)
	case r.URL.Path == ReadyzPath && r.Method == http.MethodGet:
		g.ready.ServeHTTP(w, r)
	case g.isProtected(r):
		g.protected.ServeHTTP(w, r)
	default:
		g.passThrough(w, r)
	}
}

// isProtected reports whether r matches a Protect pattern with the pattern's
// own method: ServeMux lets a GET pattern match HEAD too, which is not what
// "GET" asks to protect.
func (g *Gateway) isProtected(r *http.Request) bool {
	_, pattern := g.patterns.Handler(r)
	m, ok := g.methods[pattern]
	return ok && m == r.Method
}

// CheckPatterns reports the first of patterns that is not a METHOD /path
// ServeMux pattern, or that ServeMux refuses (it does not parse, or
// conflicts with another): an error that quotes it.
func CheckPatterns(patterns []string) error {
	_, _, err := mux(patterns)
	return err
}

// mux returns a ServeMux with every pattern (its handlers are never called),
// and the method of each pattern.
func mux(patterns []string) (*http.ServeMux, map[string]string, error) {
	m, methods := http.NewServeMux(), make(map[string]string, len(patterns))
	for _, s := range patterns {
		method, rest, ok := strings.Cut(s, " ")
		if !ok || !IsToken(method) || strings.TrimLeft(rest, " \t") == "" {
			return nil, nil, fmt.Errorf("%q: want METHOD /path, such as \"POST /payments\"", s)
		}
		if err := handle(m, s, http.NotFoundHandler()); err != nil {
			return nil, nil, fmt.Errorf("%q: %v", s, err)
		}
		methods[s] = method
	}
	return m, methods, nil
}

// handle is mux.Handle, with its panic (a pattern that does not parse or
// conflicts) returned as an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// IsToken reports whether s is a non-empty RFC 9110 token: a method or a
// header name.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// passThrough forwards an unprotected request as it is. Its connection is
// freed from the server's read and write time-outs, which bound protected
// requests: a stream, a long download or upload, or a WebSocket lasts as
// long as the client and the upstream keep it (the read-header time-out still
// applies to every request).
func (g *Gateway) passThrough(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	g.pass.ServeHTTP(w, r)
}

// newPassThrough returns the proxy of unprotected requests: httputil's, with
// the forwarding headers of rewriteOut, on a transport of its own that keeps
// connections alive and speaks HTTP/2 where the upstream offers it; roots
// (nil: the system's) check an https upstream's certificate.
func newPassThrough(upstream *url.URL, roots *x509.CertPool) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { rewriteOut(pr, upstream) },
		Transport: baseTransport(roots),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			cause.Report(r.Context(), err)
			problem.Write(w, problem.Details{Type: ProblemUpstreamUnreachable, Title: "Upstream unreachable",
				Status: gatewayStatus(err), Detail: "the upstream did not answer (" + reason(err) + ")"})
		},
	}
}

// rewriteOut points the outbound request at upstream and sets the forwarding
// headers as a careful reverse proxy does: X-Forwarded-For gets the client's
// address appended to what the request carried (the chain an upstream that
// trusts its proxies reads), X-Forwarded-Host and X-Forwarded-Proto say what
// the client asked for (those it sent are dropped), and the Host header is
// the upstream's. httputil.ReverseProxy has already removed the hop-by-hop
// headers (Connection and those it names, Keep-Alive, Proxy-*, TE but
// "trailers", Trailer, Transfer-Encoding, Upgrade but a WebSocket's) and a
// Forwarded header.
func rewriteOut(pr *httputil.ProxyRequest, upstream *url.URL) {
	pr.SetURL(upstream)
	if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 {
		pr.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
	}
	pr.SetXForwarded()
}
