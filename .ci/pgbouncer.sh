#!/usr/bin/env bash
# PgBouncer in transaction pooling mode in front of the test PostgreSQL, for the
# tests that set IDEM_PGBOUNCER_URL (pgstore's contract, concurrency and lock
# tests, idem-server's restart test).
#
#   .ci/pgbouncer.sh start   # prints the URL to export as IDEM_PGBOUNCER_URL
#   .ci/pgbouncer.sh stop
#
# Both are idempotent. It listens on 127.0.0.1:$IDEM_PGBOUNCER_PORT (default 6432)
# and forwards database "test" to PostgreSQL on 127.0.0.1:5432 as user postgres
# (trust auth, as the test server is set up). The configuration, pid and log are
# in a directory of their own under ${TMPDIR:-/tmp}; nothing is installed or
# changed elsewhere. It installs PgBouncer from the Debian packages when missing.
set -euo pipefail

port="${IDEM_PGBOUNCER_PORT:-6432}"
pg_host="${IDEM_PGBOUNCER_PG_HOST:-127.0.0.1}"
pg_port="${IDEM_PGBOUNCER_PG_PORT:-5432}"
dir="${TMPDIR:-/tmp}/idem-pgbouncer-$port"
pidfile="$dir/pgbouncer.pid"
url="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"

running() {
	[[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

ensure_installed() {
	if command -v pgbouncer >/dev/null 2>&1 || [[ -x /usr/sbin/pgbouncer ]]; then
		return 0
	fi
	echo "== installing pgbouncer (Debian package)" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2
}

bin() {
	command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer
}

start() {
	if running; then
		echo "$url"
		return 0
	fi
	ensure_installed
	mkdir -p "$dir"
	cat >"$dir/userlist.txt" <<-EOF
		"postgres" ""
	EOF
	# server_reset_query is not used in transaction mode; pool sizes leave room
	# for the other users of the shared server (max_connections 100).
	cat >"$dir/pgbouncer.ini" <<-EOF
		[databases]
		test = host=$pg_host port=$pg_port dbname=test user=postgres

		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $port
		unix_socket_dir =
		auth_type = trust
		auth_file = $dir/userlist.txt
		admin_users = postgres
		pool_mode = transaction
		max_client_conn = 1000
		default_pool_size = 20
		max_db_connections = 24
		ignore_startup_parameters = extra_float_digits
		pidfile = $pidfile
		logfile = $dir/pgbouncer.log
	EOF
	local user=()
	if [[ "$(id -u)" == 0 ]]; then # PgBouncer refuses to run as root
		chown -R postgres: "$dir"
		user=(-u postgres)
	fi
	rm -f "$pidfile"
	"$(bin)" -d "${user[@]}" "$dir/pgbouncer.ini"
	for _ in $(seq 1 50); do
		if running && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$url"
			return 0
		fi
		sleep 0.1
	done
	echo "pgbouncer did not start on 127.0.0.1:$port; log:" >&2
	cat "$dir/pgbouncer.log" >&2 || true
	return 1
}

stop() {
	if running; then
		local pid
		pid="$(cat "$pidfile")"
		kill "$pid"
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid"
		fi
	fi
	rm -rf "$dir"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
