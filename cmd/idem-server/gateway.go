package main

import (
	"net/http"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// newGateway returns the gateway (package cmd/idem-server/gateway) that the flags
// describe over store: protected requests through the middleware, with
// mwOpts (middlewareOptions) and the gateway flags' options, scoped by scope
// (scopeFunc, the process's one scope function); inj
// applies the chaos faults, and chaosOn (-chaos) keeps the Chaos-* headers
// from the upstream. check validated cfg.
func newGateway(cfg gatewayConfig, store server.Store, inj *chaos.Injector, chaosOn bool,
	scope func(*http.Request) (string, error), mwOpts ...server.Option) *gateway.Gateway {
	stored, err := cfg.storedHeaderOption()
	if err != nil {
		panic(err) // check refused it already
	}
	opts := append(mwOpts[:len(mwOpts):len(mwOpts)],
		server.WithFingerprint(fingerprints[cfg.fingerprint]),
		server.WithInProgressWait(cfg.wait),
		stored,
	)
	g, err := gateway.New(gateway.Config{
		Upstream:         cfg.upstream,
		UpstreamRootCAs:  cfg.upstreamRoots,
		Protect:          cfg.protect,
		ScopeHeader:      cfg.scopeHeader,
		Scope:            scope,
		Middleware:       opts,
		ForwardKey:       cfg.forwardKey,
		ForwardKeyHeader: cfg.forwardKeyHeader,
		UpstreamDedupes:  cfg.upstreamDedupes,
		UpstreamTimeout:  cfg.upstreamTimeout,
		MaxResponseBytes: cfg.maxResponseBytes,
		Chaos:            inj,
		ChaosHeaders:     chaosOn,
	}, store)
	if err != nil {
		panic(err) // check refused it already
	}
	return g
}
