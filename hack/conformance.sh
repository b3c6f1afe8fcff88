#!/usr/bin/env bash
# Runs the upstream Gateway API conformance suite (test/conformance) in a private network
# namespace of its own, where the whole 198.18.0.0/15 range (RFC 2544, for benchmarks) is
# local on the loopback interface and nothing else is reachable: Gateways get addresses from 198.18.1.0/24 and the pod
# runner's pods from 198.18.2.0/24. Unlike 127.0.0.0/8, the API server accepts these in
# EndpointSlices, which the suite's HTTPRouteServiceTypes test writes; and nothing the run
# binds or sends is visible outside the namespace, which ends with the run.
#
#   hack/conformance.sh [suite flags...]    e.g. -run-test=HTTPRouteWeight
#
# The suite's report (report.yaml) and a summary of every test (README.md) go to
# CONFORMANCE_REPORT_DIR (default bin/conformance; make conformance: docs/conformance).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/conformance
reports=${CONFORMANCE_REPORT_DIR:-$out}
log() { printf '[conformance] %s\n' "$*"; }

if [ -z "${SWITCHBOARD_CONFORMANCE_NETNS:-}" ]; then
  command -v unshare >/dev/null && command -v ip >/dev/null ||
    { log "needs unshare (util-linux) and ip (iproute2): apt-get install util-linux iproute2"; exit 1; }
  mkdir -p "$out" "$reports"
  # Built here, where the Go module proxy is reachable; inside the namespace nothing is.
  # The binaries are the ones test/conformance names in its commands.
  log "building the suite"
  mkdir -p "$out/bin"
  (cd "$root" && go test -c -o "$out/conformance.test" ./test/conformance &&
    go build -o "$out/bin/" ./cmd/manager ./cmd/gateway ./cmd/pod-runner ./cmd/engine-sim \
      sigs.k8s.io/gateway-api/conformance/echo-basic)
  log "running it in a private network namespace (process logs: $out/logs)"
  exec unshare --net -- env SWITCHBOARD_CONFORMANCE_NETNS=1 "$0" "$@"
fi

# An address of the range on lo makes the whole range local (the kernel adds the local
# route), and a default route through lo gives the API server an address to advertise.
ip link set lo up
ip addr add 198.18.0.1/15 dev lo
ip route add default dev lo
cd "$root/test/conformance"
exec "$out/conformance.test" -test.run '^TestGatewayAPIConformance$' -test.count 1 -test.timeout 45m -test.v \
  -switchboard.conformance -switchboard.log-dir "$out/logs" -switchboard.bin-dir "$out/bin" \
  -switchboard.gateway-addresses 198.18.1.1-198.18.1.254 -switchboard.pod-ips 198.18.2.1-198.18.2.254 \
  -switchboard.usable-address 198.18.3.1 \
  -switchboard.summary "$reports/README.md" -report-output "$reports/report.yaml" \
  -version "$(cd "$root" && git describe --always --dirty)" "$@"
