// Package tcpproxy is the TCP proxy idem's tests put between a client and a
// real server (PostgreSQL, Redis) to take the server away: Close ends every
// connection through it, as a server that is gone does, and Cut drops every
// byte from then on while closing nothing, as a network that stops passing
// packets does.
package tcpproxy

import (
	"net"
	"sync"
	"testing"
)

// A Proxy forwards the connections its listener accepts to a target address.
type Proxy struct {
	// Addr is the proxy's address: dial it in place of the target's.
	Addr string

	ln     net.Listener
	mu     sync.Mutex
	cut    bool
	closed bool
	conns  []net.Conn
}

// Start forwards the connections ln accepts to target, until Close or the
// end of tb's test. A connection the target refuses is closed at once.
func Start(tb testing.TB, ln net.Listener, target string) *Proxy {
	tb.Helper()
	p := &Proxy{Addr: ln.Addr().String(), ln: ln}
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
func (p *Proxy) track(cs ...net.Conn) bool {
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

// Close stops the proxy and closes every connection through it: both sides
// see their connections end.
func (p *Proxy) Close() {
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

// Cut drops every byte either side sends from now on, both ways, and closes
// nothing: neither side learns of it but by waiting.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
}

func (p *Proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// pipe copies from src to dst until src ends, dropping what it reads once
// cut. When src ends it closes dst, passing the end on, unless cut: a
// partitioned network passes nothing.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isCut() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.isCut() {
				_ = dst.Close()
			}
			return
		}
	}
}
