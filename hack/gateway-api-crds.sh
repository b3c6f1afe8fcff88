#!/usr/bin/env bash
# Copies the Gateway API standard-channel CRDs of the pinned module version from the Go module
# cache (downloading the module through the Go module proxy if needed) into a folder of config/.
#
#   hack/gateway-api-crds.sh VERSION DEST
set -euo pipefail
version=$1 dest=$2
dir=$(go mod download -json "sigs.k8s.io/gateway-api@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir/config/crd/standard" ] || { echo "gateway-api $version has no standard CRDs at $dir" >&2; exit 1; }
mkdir -p "$dest"
rm -f "$dest"/gateway.networking.k8s.io_*.yaml
for f in "$dir"/config/crd/standard/gateway.networking.k8s.io_*.yaml; do
  case "$f" in *_vap_*) continue ;; esac # admission policies, not CRDs
  install -m 0644 "$f" "$dest/"
done
{
  echo "# Gateway API $version standard-channel CRDs, vendored by hack/gateway-api-crds.sh from the"
  echo "# Go module cache. Do not edit: run 'make gateway-api-crds'."
  echo "resources:"
  for f in "$dest"/gateway.networking.k8s.io_*.yaml; do echo "- $(basename "$f")"; done
} > "$dest/kustomization.yaml"
