//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// checksIdleConns: peerGone can look at a connection on this system, so
// protected requests may go on kept-alive connections (reusable).
const checksIdleConns = true

// peerGone reports whether the upstream has closed c or broken it: its FIN
// or a reset is waiting, or bytes nobody asked for (an idle HTTP/1.1
// connection carries none). It peeks without waiting and takes nothing. A
// connection it cannot look at counts as gone: the request then goes on
// another one.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := true
	err = raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is a live idle connection; a byte, the
		// end of the stream (no error) or an error is not.
		gone = !errors.Is(rerr, syscall.EAGAIN) && !errors.Is(rerr, syscall.EWOULDBLOCK)
	})
	return gone || err != nil
}
