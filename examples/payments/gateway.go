package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// gateway forwards every request to upstream and, like many load balancers
// and API gateways, does not cancel the upstream request when its client hangs
// up. That is what makes a client-side timeout ambiguous: the client has given
// up, but the server is still working and may still charge.
type gateway struct {
	upstream string       // base URL of the server, no trailing slash
	client   *http.Client // to upstream
	done     chan struct{}
}

func newGateway(upstream string) *gateway {
	return &gateway{
		upstream: upstream,
		// No keep-alives upstream: net/http silently resends a request that
		// carries an Idempotency-Key when a reused connection dies before the
		// response, and this demo wants every request to be one the client sent.
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		done:   make(chan struct{}, 256),
	}
}

// ServeHTTP forwards r upstream with a context that its client cannot cancel.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() { g.done <- struct{}{} }()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "gateway: reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := context.WithoutCancel(r.Context()) // the client hanging up does not stop upstream
	out, err := http.NewRequestWithContext(ctx, r.Method, g.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, "gateway: "+err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Header.Del("Connection")
	resp, err := g.client.Do(out)
	if err != nil {
		http.Error(w, "gateway: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// await waits until n more forwarded requests have finished upstream, or
// returns an error after within.
func (g *gateway) await(n int, within time.Duration) error {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for i := range n {
		select {
		case <-g.done:
		case <-timer.C:
			return fmt.Errorf("gateway: %d of %d requests still running after %v", n-i, n, within)
		}
	}
	return nil
}
