package servicetest

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports hands out loopback addresses in a range of ports kept for the private
// servers a package's tests start (redis-server, PostgreSQL, proxies), moved
// by EnvPortOffset. Ports are handed out in turn, so that two tests of one
// process do not get the same port while the first one's server starts. Its
// methods are safe for concurrent use.
type Ports struct {
	first, last int
	mu          sync.Mutex
	next        int
}

// NewPorts returns the range first to last (both included, before the offset).
func NewPorts(first, last int) *Ports {
	first, last = Port(first), Port(last)
	return &Ports{first: first, last: last, next: first}
}

// Addr returns "127.0.0.1:port" for the next port of the range on which
// nothing listens now, and fails tb when every port of the range is taken.
func (p *Ports) Addr(tb testing.TB) string {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.last - p.first + 1 {
		port := p.next
		p.next++
		if p.next > p.last {
			p.next = p.first
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			_ = l.Close()
			return l.Addr().String()
		}
	}
	tb.Fatalf("no free port in 127.0.0.1:%d-%d", p.first, p.last)
	return ""
}
