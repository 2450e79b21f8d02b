package pgtest

import (
	"net"
	"net/url"
	"strconv"
	"testing"

	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/internal/testkit/tcpproxy"
)

// A Partition is a TCP proxy in this process between a pool and the test
// server, on a loopback port of 7114-7119 (moved by IDEM_PRIVATE_PORT_OFFSET).
// Cut partitions it: every byte either side sends from then on is dropped,
// and nothing is closed or reset, as when the network between the two stops
// passing packets. Close closes every connection through it: a pool on it
// closes at once.
type Partition struct {
	// URL is the test server's URL through the proxy.
	URL string
	*tcpproxy.Proxy
}

// NewPartition starts a proxy to the test server at URL, stopped at cleanup.
func NewPartition(tb testing.TB) *Partition {
	tb.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	var ln net.Listener
	first := servicetest.Port(7114)
	for port := first; port < first+6 && ln == nil; port++ {
		ln, _ = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	if ln == nil {
		tb.Fatalf("pgtest: no free port in 127.0.0.1:%d-%d", first, first+5)
	}
	p := tcpproxy.Start(tb, ln, u.Host)
	u.Host = p.Addr
	return &Partition{URL: u.String(), Proxy: p}
}
