//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package gateway

import "net"

// checksIdleConns: on this system peerGone cannot look at a connection, so
// every protected request goes on a new connection of its own (reusable).
const checksIdleConns = false

// peerGone cannot tell here: every connection counts as gone.
func peerGone(net.Conn) bool { return true }
