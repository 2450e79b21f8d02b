#!/usr/bin/env bash
# A real Prometheus scrapes idem-server under a short soak with faults: installs
# Debian's prometheus package when missing (ensure_pkg), then runs idem-server's
# TestPrometheusSoak, which starts its own Prometheus on a loopback port of
# 17200-17299 (data in the test's temporary directory, killed at the end),
# scrapes the idem-server binary and the soak client's metrics, and checks the
# numbers its HTTP API returns against what the soak counted. The test fails,
# and so does this script, when Prometheus cannot be installed or started.
#
#   .ci/prometheus-soak.sh     # about 30s once the package is installed
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/lib.sh

ensure_pkg prometheus
bin=$(command -v prometheus || true)
if [ -z "$bin" ]; then
	echo "prometheus-soak: no prometheus binary after installing the package" >&2
	exit 1
fi
cd cmd/idem-server
IDEM_PROMETHEUS="$bin" exec go test -race -count=1 -timeout 5m -run '^TestPrometheusSoak$' -v .
