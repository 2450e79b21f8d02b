package pgtest

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/servicetest"
)

// A Partition is a TCP proxy in this process between a pool and the test
// server, on a loopback port of 7114-7119 (moved by IDEM_PRIVATE_PORT_OFFSET).
// Cut partitions it: every byte either side sends from then on is dropped,
// and nothing is closed or reset, as when the network between the two stops
// passing packets.
type Partition struct {
	// URL is the test server's URL through the proxy.
	URL string

	ln     net.Listener
	mu     sync.Mutex
	cut    bool
	closed bool
	conns  []net.Conn
}

// NewPartition starts a proxy to the test server at URL, stopped at cleanup.
func NewPartition(tb testing.TB) *Partition {
	tb.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	target := u.Host
	var ln net.Listener
	first := servicetest.Port(7114)
	for port := first; port < first+6 && ln == nil; port++ {
		ln, _ = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	if ln == nil {
		tb.Fatalf("pgtest: no free port in 127.0.0.1:%d-%d", first, first+5)
	}
	u.Host = ln.Addr().String()
	p := &Partition{URL: u.String(), ln: ln}
	tb.Cleanup(p.Close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !p.track(c, up) {
				return
			}
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	return p
}

// track keeps the connections for Close; false once closed (it closes them).
func (p *Partition) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	p.conns = append(p.conns, cs...)
	return true
}

// Close stops the proxy and closes every connection through it (both sides
// then see the connection end): a pool on it closes at once.
func (p *Partition) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// Cut drops every byte from now on, both ways.
func (p *Partition) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
}

func (p *Partition) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// pipe copies from src to dst until src ends, dropping what it reads once cut.
func (p *Partition) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isCut() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
