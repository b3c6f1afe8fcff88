#!/usr/bin/env bash
# Copies the CRDs of a pinned Go module version from the Go module cache (downloading the
# module through the Go module proxy if needed) into a folder of config/, with a
# kustomization listing them.
#
#   hack/vendor-crds.sh MODULE VERSION SOURCE-DIR FILE-PREFIX DEST
#
# e.g. hack/vendor-crds.sh sigs.k8s.io/gateway-api v1.4.0 config/crd/standard gateway.networking.k8s.io_ config/crd/gateway-api
set -euo pipefail
module=$1 version=$2 src=$3 prefix=$4 dest=$5
dir=$(go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir/$src" ] || { echo "$module $version has no $src at $dir" >&2; exit 1; }
mkdir -p "$dest"
rm -f "$dest/$prefix"*.yaml
for f in "$dir/$src/$prefix"*.yaml; do
  case "$f" in *_vap_*) continue ;; esac # admission policies, not CRDs
  install -m 0644 "$f" "$dest/"
done
{
  echo "# $module $version CRDs ($src), vendored by hack/vendor-crds.sh from the"
  echo "# Go module cache. Do not edit: run 'make vendor-crds'."
  echo "resources:"
  for f in "$dest/$prefix"*.yaml; do echo "- $(basename "$f")"; done
} > "$dest/kustomization.yaml"
