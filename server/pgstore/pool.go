package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrStatementCacheBehindProxy is wrapped by Migrate's error when the pool keeps
// pgx's default statement cache (QueryExecModeCacheStatement) although it reaches
// PostgreSQL through a proxy, such as PgBouncer in transaction mode, where named
// prepared statements fail (SQLSTATE 42P05, 26000). Build the pool with NewPool or
// ConfigurePool, or name a default_query_exec_mode in the connection string.
var ErrStatementCacheBehindProxy = errors.New("pgstore: pgx statement cache behind a connection proxy")

// NewPool is pgxpool.New with ConfigurePool applied: a pool that works with
// PostgreSQL directly and through PgBouncer, whatever its pooling mode. It
// connects once to tell the two apart.
func NewPool(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := ConfigurePool(ctx, cfg); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return pool, nil
}

// ConfigurePool chooses the query mode of the pool cfg describes, unless its
// connection string names one (default_query_exec_mode), by connecting once:
//
//   - PostgreSQL reached directly: pgx's default, QueryExecModeCacheStatement
//     (named prepared statements, cached per connection), the fastest;
//   - through a proxy (the server sees another client port than the one this
//     process connected from: PgBouncer, or any TCP proxy):
//     QueryExecModeCacheDescribe, which uses only unnamed statements and so
//     survives PgBouncer's transaction and statement pooling.
//
// The mode applies to every statement on the pool's connections, the store's and
// the handler's (through Tx) alike. A proxy that keeps one server session per
// client (docker-proxy, a TCP load balancer) does not need the change; name the
// mode in the connection string to keep the cache there.
//
// It also makes the pool's connections notice a partition (a PostgreSQL that
// neither answers nor resets) within about 30 s instead of the kernel's
// minutes or hours: TCP keepalives (15 s idle, then every 5 s, 3 probes) and
// TCP_USER_TIMEOUT (30 s, on Linux) on this side, around any DialFunc cfg
// already has; and, when PostgreSQL is reached directly, the same on the
// server's side of each session (tcp_keepalives_idle, tcp_keepalives_interval,
// tcp_keepalives_count, tcp_user_timeout, unless the connection string names
// them), so that PostgreSQL ends the backend of a client cut off, and the
// transaction and the key's lock with it.
func ConfigurePool(ctx context.Context, cfg *pgxpool.Config) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	proxied, err := behindProxy(ctx, conn)
	if err != nil {
		return fmt.Errorf("pgstore: detecting a connection proxy: %w", err)
	}
	configureKeepAlive(cfg, proxied)
	if proxied && !explicitMode(cfg.ConnConfig) {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return nil
}

// explicitMode reports whether the connection string names a query mode.
func explicitMode(cc *pgx.ConnConfig) bool {
	return strings.Contains(cc.ConnString(), "default_query_exec_mode")
}

// behindProxy reports whether conn reaches PostgreSQL through a proxy: the
// client port the server sees is not the local port of conn's socket. A Unix
// socket has no port to compare and counts as direct. The statement uses the
// simple protocol, which works on any pool.
func behindProxy(ctx context.Context, conn *pgx.Conn) (bool, error) {
	local, ok := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr)
	if !ok {
		return false, nil
	}
	var seen *int32
	if err := conn.QueryRow(ctx, "SELECT inet_client_port()", pgx.QueryExecModeSimpleProtocol).Scan(&seen); err != nil {
		return false, err
	}
	return seen == nil || int(*seen) != local.Port, nil
}

// checkPool is Migrate's check that the store's pool can work: a statement cache
// behind a proxy fails under PgBouncer's transaction pooling on the first
// request, so Migrate refuses it at start-up with the fix.
func (s *Store) checkPool(ctx context.Context) error {
	cfg := s.pool.Config().ConnConfig
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || explicitMode(cfg) {
		return nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	proxied, err := behindProxy(ctx, conn.Conn())
	if err != nil || !proxied {
		return err
	}
	return fmt.Errorf("%w: build the pool with pgstore.NewPool or pgstore.ConfigurePool, or set default_query_exec_mode in the connection string (cache_describe for PgBouncer; cache_statement keeps the cache for a proxy that keeps sessions)", ErrStatementCacheBehindProxy)
}
