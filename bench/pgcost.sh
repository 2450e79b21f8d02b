#!/usr/bin/env bash
# pgcost.sh: what one request of bench §5 costs PostgreSQL, in instructions
# counted by valgrind's callgrind (repeatable on a machine shared with other
# work, unlike times), for the own-transaction baseline, a new key and a
# replay of the PostgreSQL store (server/pgstore's TestCostPerRequest).
#
#   bench/pgcost.sh [port] [functions...]
#
# It starts a private PostgreSQL 15 under callgrind on 127.0.0.1:port
# (default 17101) in a temporary directory, runs the test against it, prints
# the instructions per request of each case, those of a connection apart from
# its requests (its start, its first statements' planning, the catalog caches)
# and, for each function named
# (PostgreSQL's C functions: ExecConstraints, set_config_by_name, ...), the
# instructions per request spent in it (inclusive), then stops the server and
# deletes the directory. Needs valgrind and PostgreSQL's server binaries
# (PGBIN, default /usr/lib/postgresql/15/bin); as root it runs the server as
# the postgres user.
set -euo pipefail
port=${1:-17101}
shift || true
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/idem-pgcost.XXXXXX)
as=()
if [ "$(id -u)" = 0 ]; then
	chown postgres "$dir"
	as=(su postgres -s /bin/bash -c)
else
	as=(bash -c)
fi
cleanup() {
	"${as[@]}" "$pgbin/pg_ctl -D $dir/data -m fast -w stop" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT

"${as[@]}" "$pgbin/initdb -D $dir/data -A trust -U postgres" >"$dir/initdb.log"
cat >>"$dir/data/postgresql.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_buffers = 128MB
autovacuum = off
EOF
mkdir "$dir/cg"
[ "$(id -u)" = 0 ] && chown postgres "$dir/cg"
"${as[@]}" "cd $dir && nohup valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$dir/cg/cg.%p \
	$pgbin/postgres -D $dir/data >$dir/server.log 2>&1 &"
for _ in $(seq 120); do
	"$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
	sleep 1
done
"$pgbin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -c "CREATE DATABASE cost" postgres

(cd "$repo/server/pgstore" && IDEM_PGCOST_URL="postgres://postgres@127.0.0.1:$port/cost?sslmode=disable" \
	go test -count=1 -run '^TestCostPerRequest$' -v -timeout 60m . | grep '^COST ') >"$dir/runs"
"${as[@]}" "$pgbin/pg_ctl -D $dir/data -m fast -w stop" >/dev/null

# ir FILE [FUNCTION]: the total instructions of a backend, or those spent in
# FUNCTION and what it calls.
ir() {
	if [ $# = 1 ]; then
		grep -E '^(summary|totals):' "$1" | head -1 | awk '{print $2}'
	else
		callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
			awk -v f="$2" '{ for (i = 2; i <= NF; i++) if ($i ~ ("^[^:]*:" f "$")) { gsub(",", "", $1); s += $1 } } END { print s + 0 }'
	fi
}
printf '%-10s %12s %16s' case 'Ir/request' 'Ir/connection'
for f in "$@"; do printf ' %14s' "$f"; done
echo
for c in $(awk '{print $2}' "$dir/runs" | uniq); do
	read -r n1 p1 <<<"$(awk -v c="$c" '$2 == c {print $3, $4; exit}' "$dir/runs")"
	read -r n2 p2 <<<"$(awk -v c="$c" '$2 == c {l = $3 " " $4} END {print l}' "$dir/runs")"
	per=$((($(ir "$dir/cg/cg.$p2") - $(ir "$dir/cg/cg.$p1")) / (n2 - n1)))
	printf '%-10s %12d %16d' "$c" "$per" $(($(ir "$dir/cg/cg.$p1") - n1 * per))
	for f in "$@"; do
		printf ' %14d' $((($(ir "$dir/cg/cg.$p2" "$f") - $(ir "$dir/cg/cg.$p1" "$f")) / (n2 - n1)))
	done
	echo
done
