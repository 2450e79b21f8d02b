package main

import (
	"net/http"

	"github.com/idemkit/idem/server"
)

// newLimits returns the process-wide bounds of -max-buffered-bytes,
// -max-waiting and -request-timeout: one server.Limits that every protected
// request the process serves counts in, whatever the mode.
func newLimits(cfg config) *server.Limits {
	return server.NewLimits(server.LimitBuffered(cfg.maxBuffered), server.LimitWaiting(cfg.maxWaiting),
		server.LimitRequestTime(cfg.requestTimeout))
}

// middlewareOptions are the idempotency middleware's options in both modes
// (the demo's POST /payments, the gateway's forwarded requests): the record's
// and the claim's lifetimes (-ttl, -lock-ttl), the process's Limits (lim,
// shared by every middleware the process builds), the scope function
// (scopeFunc: one for the whole process) and the telemetry hook.
func middlewareOptions(cfg config, tel *telemetry, scope func(*http.Request) (string, error), lim *server.Limits) []server.Option {
	return append([]server.Option{server.WithTTL(cfg.ttl), server.WithLockTTL(cfg.lockTTL), server.WithLimits(lim),
		server.WithScope(scope)}, tel.middlewareOptions(cfg.store)...)
}
