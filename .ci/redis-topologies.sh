#!/usr/bin/env bash
# Starts or stops the Redis topologies the store tests run on, with the
# redis-server and redis-cli Debian ships (7.0), on loopback ports 7100-7199 only,
# moved by IDEM_PRIVATE_PORT_OFFSET (default 0) as the tests' private servers are:
#
#   Cluster:  3 masters on 7101-7103 (cluster bus on 7111-7113), no replicas.
#   Sentinel: master 7120, replica 7121, sentinels 7130.. (1 to 3, SENTINELS=N,
#             default 3), master name "idem-master".
#
# Data lives in a temp dir ($IDEM_TOPOLOGY_DIR, default /tmp/idem-redis-topologies).
# Both commands are idempotent: start leaves running servers alone and only waits
# for them; stop stops only the servers this script started (by their pid files)
# and removes the dir. After start, point the tests at them with:
#
#   export IDEM_REDIS_CLUSTER_ADDRS=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
#   export IDEM_REDIS_SENTINEL_ADDRS=127.0.0.1:7130,127.0.0.1:7131,127.0.0.1:7132
#   export IDEM_REDIS_MASTER_NAME=idem-master
#
# ("print-env" prints exactly these lines for the current SENTINELS.)
set -euo pipefail

DIR="${IDEM_TOPOLOGY_DIR:-/tmp/idem-redis-topologies}"
SENTINELS="${SENTINELS:-3}"
MASTER_NAME="idem-master"
OFFSET="${IDEM_PRIVATE_PORT_OFFSET:-0}"
case "$OFFSET" in
'' | *[!0-9]* | ??????*) OFFSET=65535 ;; # refused below
esac
if [ $((7132 + OFFSET)) -gt 65535 ]; then
	echo "IDEM_PRIVATE_PORT_OFFSET=$IDEM_PRIVATE_PORT_OFFSET: want a number that keeps the ports up to 65535" >&2
	exit 2
fi
CLUSTER_PORTS=($((7101 + OFFSET)) $((7102 + OFFSET)) $((7103 + OFFSET)))
MASTER_PORT=$((7120 + OFFSET))
REPLICA_PORT=$((7121 + OFFSET))

case "$SENTINELS" in
1 | 2 | 3) ;;
*)
	echo "SENTINELS=$SENTINELS: want 1, 2 or 3" >&2
	exit 2
	;;
esac
SENTINEL_PORTS=()
for i in $(seq 0 $((SENTINELS - 1))); do SENTINEL_PORTS+=($((7130 + OFFSET + i))); done

up() { redis-cli -h 127.0.0.1 -p "$1" ping >/dev/null 2>&1; }

# wait_for tries "$@" every 0.1 s for up to 20 s.
wait_for() {
	for _ in $(seq 1 200); do
		if "$@"; then return 0; fi
		sleep 0.1
	done
	echo "timed out waiting for: $*" >&2
	return 1
}

# server PORT ARGS... starts a redis-server on PORT unless one answers there.
server() {
	local port=$1
	shift
	if up "$port"; then return 0; fi
	mkdir -p "$DIR/$port"
	redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR/$port" --daemonize yes \
		--pidfile "$DIR/$port/redis.pid" --logfile "$DIR/$port/redis.log" \
		--save "" --appendonly no "$@"
}

cluster_ok() { redis-cli -h 127.0.0.1 -p "${CLUSTER_PORTS[0]}" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

start_cluster() {
	for port in "${CLUSTER_PORTS[@]}"; do
		server "$port" --cluster-enabled yes --cluster-port $((port + 10)) \
			--cluster-config-file "$DIR/$port/nodes.conf" --cluster-node-timeout 2000
	done
	for port in "${CLUSTER_PORTS[@]}"; do wait_for up "$port"; done
	if cluster_ok; then return 0; fi
	local nodes=()
	for port in "${CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
	if [ "$(redis-cli -h 127.0.0.1 -p "${CLUSTER_PORTS[0]}" cluster info | grep -c '^cluster_known_nodes:1')" = 1 ]; then
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/cluster-create.log"
	fi
	wait_for cluster_ok
}

sentinel_sees_replica() {
	redis-cli -h 127.0.0.1 -p "${SENTINEL_PORTS[0]}" sentinel replicas "$MASTER_NAME" 2>/dev/null | grep -q '^127.0.0.1$'
}

start_sentinel() {
	server "$MASTER_PORT"
	server "$REPLICA_PORT" --replicaof 127.0.0.1 "$MASTER_PORT"
	wait_for up "$MASTER_PORT"
	wait_for up "$REPLICA_PORT"
	for port in "${SENTINEL_PORTS[@]}"; do
		if up "$port"; then continue; fi
		mkdir -p "$DIR/$port"
		# A sentinel rewrites its config file: give each its own. The current
		# master is asked, so a restart after a failover follows it. The tests
		# fail over on purpose (SENTINEL FAILOVER); a majority quorum and a long
		# down-after keep a loaded machine from failing over on its own.
		local master_port=$MASTER_PORT
		if redis-cli -h 127.0.0.1 -p "$REPLICA_PORT" role 2>/dev/null | head -n1 | grep -q master; then
			master_port=$REPLICA_PORT
		fi
		cat >"$DIR/$port/sentinel.conf" <<EOF
port $port
bind 127.0.0.1
dir $DIR/$port
pidfile $DIR/$port/redis.pid
logfile $DIR/$port/redis.log
daemonize yes
sentinel monitor $MASTER_NAME 127.0.0.1 $master_port $((SENTINELS / 2 + 1))
sentinel down-after-milliseconds $MASTER_NAME 10000
sentinel failover-timeout $MASTER_NAME 5000
sentinel parallel-syncs $MASTER_NAME 1
EOF
		redis-server "$DIR/$port/sentinel.conf" --sentinel
	done
	for port in "${SENTINEL_PORTS[@]}"; do wait_for up "$port"; done
	wait_for sentinel_sees_replica
}

stop_all() {
	[ -d "$DIR" ] || return 0
	local pids=()
	for pidfile in "$DIR"/*/redis.pid; do
		[ -f "$pidfile" ] || continue
		local pid
		pid=$(cat "$pidfile")
		# Only a redis process this script started (its pid file is in $DIR).
		if [ -n "$pid" ] && grep -q redis "/proc/$pid/comm" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 1 100); do
			[ -e "/proc/$pid" ] || break
			sleep 0.1
		done
	done
	rm -rf "$DIR"
}

print_env() {
	local c s
	c=$(printf '127.0.0.1:%s,' "${CLUSTER_PORTS[@]}")
	s=$(printf '127.0.0.1:%s,' "${SENTINEL_PORTS[@]}")
	echo "export IDEM_REDIS_CLUSTER_ADDRS=${c%,}"
	echo "export IDEM_REDIS_SENTINEL_ADDRS=${s%,}"
	echo "export IDEM_REDIS_MASTER_NAME=$MASTER_NAME"
}

case "${1:-}" in
start)
	mkdir -p "$DIR"
	start_cluster
	start_sentinel
	;;
stop) stop_all ;;
print-env) print_env ;;
*)
	echo "usage: $0 start|stop|print-env" >&2
	exit 2
	;;
esac
