package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// toxic is a toxiproxy toxic: its type ("latency", "reset_peer", "timeout",
// "limit_data", "bandwidth"), its stream ("upstream": client to server,
// "downstream": server to client) and its attributes.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// proxy is a toxiproxy proxy running in this process, on 127.0.0.1, in front
// of one upstream server.
type proxy struct {
	p   *toxiproxy.Proxy
	URL string // http://127.0.0.1:port
}

// newProxy starts a proxy in front of upstream (a base URL) and stops it when
// the test ends.
func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, t.Name(), "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &proxy{p: p, URL: "http://" + p.Listen}
}

// add adds tx (toxicity 1: every connection) to the proxy.
func (p *proxy) add(t *testing.T, tx toxic) {
	t.Helper()
	if tx.Toxicity == 0 {
		tx.Toxicity = 1
	}
	b, err := json.Marshal(tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		t.Fatalf("toxiproxy: adding %s: %v", tx.Name, err)
	}
}

// remove removes the toxic called name. Connections opened afterwards are
// clean.
func (p *proxy) remove(name string) error {
	return p.p.Toxics.RemoveToxic(context.Background(), name)
}
