# Shell helpers for the .ci scripts; source it (. .ci/lib.sh) after set -euo pipefail.

# ensure_pkg PKG...: installs the Debian packages of PKG... that are not installed
# (apt-get update first, at most once per run). Does nothing when all are there, so
# it is cheap to call from every script that needs a package:
#   . .ci/lib.sh; ensure_pkg pgbouncer
ensure_pkg() {
	local pkg missing=()
	for pkg in "$@"; do
		if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
			missing+=("$pkg")
		fi
	done
	[ "${#missing[@]}" -eq 0 ] && return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "== apt-get install ${missing[*]}"
	if [ -z "${IDEM_CI_APT_UPDATED:-}" ]; then
		"${sudo[@]}" apt-get update -qq
		IDEM_CI_APT_UPDATED=1
	fi
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
