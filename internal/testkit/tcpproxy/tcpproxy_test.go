package tcpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with itself, on a loopback port the system
// picks.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := Start(t, ln, echoServer(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

// TestProxyForwardsAndCloses: bytes go through both ways; Close ends the
// client's connection (it reads EOF or a reset).
func TestProxyForwardsAndCloses(t *testing.T) {
	t.Parallel()
	p, c := dialProxy(t)
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "hello")
	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close: %v, want the connection ended", err)
	}
}

// TestProxyCutDropsAndClosesNothing: after Cut a write goes nowhere and the
// connection stays open: the client learns of the cut only by its own
// deadline.
func TestProxyCutDropsAndClosesNothing(t *testing.T) {
	t.Parallel()
	p, c := dialProxy(t)
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "before")
	p.Cut()
	if _, err := c.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Cut: %v, want nothing until the deadline", err)
	}
}
