package main

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/idemkit/idem/internal/demo/cause"
	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// Paths the gateway answers itself, under a prefix of its own so that every
// other path reaches the upstream (the metrics are served at gatewayMetrics
// by the telemetry, see run).
const (
	gatewayPrefix  = "/_idem/"
	gatewayLivez   = gatewayPrefix + "livez"
	gatewayReadyz  = gatewayPrefix + "readyz"
	gatewayMetrics = gatewayPrefix + "metrics"
)

// maxProblemBytes bounds the gateway's own problem answers, which are
// recorded however small -max-response-bytes is.
const maxProblemBytes = 4 << 10

// gateway is idem-server's -upstream mode: a reverse proxy in front of an API
// it does not own. A request that matches a -protect pattern goes through
// server.Middleware to the forwarder (see forwarder); every other request is
// passed through to the upstream untouched, by a plain httputil.ReverseProxy.
type gateway struct {
	// patterns holds the -protect patterns, for matching only (its handlers
	// are never called: ServeMux would clean paths and redirect); methods is
	// each pattern's method.
	patterns  *http.ServeMux
	methods   map[string]string
	protected http.Handler
	pass      http.Handler
	store     server.Store
}

// newGateway returns the gateway that cfg describes over store. inj applies
// the chaos faults to the protected requests; mwOpts are the middleware's
// options (TTL, lock TTL, telemetry) before the gateway's own.
func newGateway(cfg gatewayConfig, store server.Store, inj *chaos.Injector, chaosOn bool, mwOpts ...server.Option) *gateway {
	patterns, methods, err := cfg.protect.mux(http.NotFoundHandler())
	if err != nil { // check refused it already
		panic(err)
	}
	stored, err := cfg.storedHeaderOption()
	if err != nil {
		panic(err)
	}
	var protectedMethods []string
	seen := map[string]bool{}
	for _, m := range methods {
		if !seen[m] {
			seen[m] = true
			protectedMethods = append(protectedMethods, m)
		}
	}
	opts := append(mwOpts,
		server.WithMethods(protectedMethods...),
		server.WithScope(gatewayScope(cfg.scopeHeader)),
		server.WithFingerprint(fingerprints[cfg.fingerprint]),
		server.WithInProgressWait(cfg.wait),
		// The forwarder holds upstream answers to -max-response-bytes; the
		// capture has room for its own problem answers besides.
		server.WithMaxResponseBytes(max(cfg.maxResponseBytes, maxProblemBytes)),
		stored,
	)
	fwd := newForwarder(cfg, inj, chaosOn)
	return &gateway{
		patterns:  patterns,
		methods:   methods,
		protected: inj.Wrap(server.Middleware(store, opts...)(fwd)),
		pass:      newPassThrough(cfg.upstream),
		store:     store,
	}
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == gatewayLivez && r.Method == http.MethodGet:
		plainText(w, http.StatusOK, "ok\n")
	case r.URL.Path == gatewayReadyz && r.Method == http.MethodGet:
		g.ready(w, r)
	case g.isProtected(r):
		g.protected.ServeHTTP(w, r)
	default:
		g.passThrough(w, r)
	}
}

// isProtected reports whether r matches a -protect pattern with the
// pattern's own method: ServeMux lets a GET pattern match HEAD too, which
// is not what "GET" asks to protect.
func (g *gateway) isProtected(r *http.Request) bool {
	_, pattern := g.patterns.Handler(r)
	m, ok := g.methods[pattern]
	return ok && m == r.Method
}

// passThrough forwards an unprotected request as it is. Its connection is
// freed from the server's read and write time-outs, which bound protected
// requests: a stream, a long download or upload, or a WebSocket lasts as
// long as the client and the upstream keep it (the read-header time-out still
// applies to every request).
func (g *gateway) passThrough(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	g.pass.ServeHTTP(w, r)
}

// readyTimeout bounds a readiness check's Ping.
const readyTimeout = 2 * time.Second

// ready answers the readiness check: 200 when the store answers its Ping
// (server.Pinger; a store without one is ready), else 503. The upstream is
// not asked: its readiness is its own.
func (g *gateway) ready(w http.ResponseWriter, r *http.Request) {
	if p, ok := g.store.(server.Pinger); ok {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			cause.Report(r.Context(), err)
			plainText(w, http.StatusServiceUnavailable, "store unavailable\n")
			return
		}
	}
	plainText(w, http.StatusOK, "ready\n")
}

func plainText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// newPassThrough returns the proxy of unprotected requests: httputil's, with
// the forwarding headers of rewriteOut, on a transport of its own that keeps
// connections alive and speaks HTTP/2 where the upstream offers it.
func newPassThrough(upstream *url.URL) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the upstream is next to the gateway: no HTTP_PROXY detour
	return &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { rewriteOut(pr, upstream) },
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			cause.Report(r.Context(), err)
			writeGatewayProblem(w, problem.Details{Type: problemUpstreamUnreachable, Title: "Upstream unreachable",
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
