# Shell helpers for the .ci scripts; source it (. .ci/lib.sh) after set -euo pipefail.

# ensure_pkg PKG...: installs the Debian packages of PKG... that are not installed
# (apt-get update first, at most once per run). Does nothing when all are there, so
# it is cheap to call from every script that needs a package:
#   . .ci/lib.sh; ensure_pkg pgbouncer
# .ci/run runs its checks at once: their installs take turns (flock), and a package
# another one installed meanwhile is not installed again.
ensure_pkg() {
	[ "$(missing_pkgs "$@")" ] || return 0
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	(
		if command -v flock >/dev/null; then flock 9; fi
		local missing
		read -r -a missing <<<"$(missing_pkgs "$@")"
		[ "${#missing[@]}" -gt 0 ] || exit 0
		echo "== apt-get install ${missing[*]}"
		if [ -z "${IDEM_CI_APT_UPDATED:-}" ]; then
			"${sudo[@]}" apt-get update -qq
		fi
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
	) 9>"${TMPDIR:-/tmp}/idem-ci-apt.lock"
	IDEM_CI_APT_UPDATED=1
}

# ensure_cmd CMD:PKG...: installs Debian's PKG for each CMD not on the PATH (a
# command installed another way, python3 from pyenv say, is left as it is).
ensure_cmd() {
	local pair pkgs=()
	for pair in "$@"; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || pkgs+=("${pair#*:}")
	done
	[ "${#pkgs[@]}" -eq 0 ] || ensure_pkg "${pkgs[@]}"
}

# missing_pkgs PKG...: prints those of PKG... that are not installed.
missing_pkgs() {
	local pkg
	for pkg in "$@"; do
		if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
			printf '%s ' "$pkg"
		fi
	done
}
