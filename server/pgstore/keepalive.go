package pgstore

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// How a partition between this process and PostgreSQL (no answer, no reset)
// is noticed, on both sides. Without these, a connection into a partition
// waits for the kernel's defaults: about 15 minutes of retransmissions for a
// statement sent, two hours before the first keepalive of an idle one, and
// PostgreSQL keeps the backend, its open transaction and the key's lock as
// long.
const (
	keepAliveIdle     = 15 * time.Second // idle time before the first probe
	keepAliveInterval = 5 * time.Second  // between probes
	keepAliveCount    = 3                // unanswered probes before the connection is dead
	// userTimeout bounds how long data sent stays unacknowledged before the
	// connection is dead (TCP_USER_TIMEOUT): a statement sent into a
	// partition fails within it.
	userTimeout = keepAliveIdle + keepAliveCount*keepAliveInterval
)

// configureKeepAlive makes cfg's connections notice a partition within about
// userTimeout: TCP keepalives and TCP_USER_TIMEOUT on this side (kept on any
// DialFunc cfg already has), and, unless proxied (PgBouncer keeps its own
// server connections and refuses unknown startup parameters), the same on
// PostgreSQL's side of each session (tcp_keepalives_idle, _interval, _count
// and tcp_user_timeout), so the server ends the backend of a client it cannot
// reach and the key's lock goes with it. A parameter the connection string
// names is left as it is.
func configureKeepAlive(cfg *pgxpool.Config, proxied bool) {
	cc := cfg.ConnConfig
	dial := cc.DialFunc
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle,
				Interval: keepAliveInterval, Count: keepAliveCount})
			setUserTimeout(tc, userTimeout)
		}
		return conn, nil
	}
	if proxied {
		return
	}
	for name, v := range map[string]string{
		"tcp_keepalives_idle":     strconv.Itoa(int(keepAliveIdle / time.Second)),
		"tcp_keepalives_interval": strconv.Itoa(int(keepAliveInterval / time.Second)),
		"tcp_keepalives_count":    strconv.Itoa(keepAliveCount),
		"tcp_user_timeout":        strconv.Itoa(int(userTimeout / time.Millisecond)),
	} {
		if _, named := cc.RuntimeParams[name]; !named {
			cc.RuntimeParams[name] = v
		}
	}
}
