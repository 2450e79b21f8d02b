//go:build !linux

package pgstore

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not known: the
// keepalives alone bound an idle connection there.
func setUserTimeout(*net.TCPConn, time.Duration) {}
