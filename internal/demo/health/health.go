// Package health holds the liveness and readiness answers that idem-server
// gives in both its modes: the demo's /livez and /readyz (internal/demo) and
// the gateway's /_idem/livez and /_idem/readyz (cmd/idem-server/gateway).
package health

import (
	"context"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/demo/cause"
	"github.com/idemkit/idem/server"
)

// ReadyTimeout bounds a readiness check's Ping.
const ReadyTimeout = 2 * time.Second

// Live answers the liveness check: 200 "ok" while the process serves.
func Live(w http.ResponseWriter, _ *http.Request) {
	text(w, http.StatusOK, "ok\n")
}

// Ready returns the readiness check of store: 200 "ready" when the store
// answers its Ping within ReadyTimeout (server.Pinger; a store without one is
// ready), else 503 "store unavailable", with the Ping's error passed to
// cause.Report for the request log.
func Ready(store server.Store) http.HandlerFunc {
	p, _ := store.(server.Pinger)
	return func(w http.ResponseWriter, r *http.Request) {
		if p != nil {
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			if err := p.Ping(ctx); err != nil {
				cause.Report(r.Context(), err)
				text(w, http.StatusServiceUnavailable, "store unavailable\n")
				return
			}
		}
		text(w, http.StatusOK, "ready\n")
	}
}

// text writes body as an uncached plain-text answer with status.
func text(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
