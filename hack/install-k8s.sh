#!/usr/bin/env bash
# Builds the local control plane's binaries from the Go module proxy, pinned by the tool modules
# under hack/tools: kube-apiserver, kube-controller-manager and kubectl (k8s.io/kubernetes), and etcd
# (go.etcd.io/etcd/server/v3). Each build lands in a per-user cache outside the clone, keyed by
# the tool module's go.sum, and is linked into bin/k8s, so a fresh clone on the same machine
# reuses it. Idempotent: prints what it skips.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=${K8S_BIN_DIR:-$root/bin/k8s}
cache_root=${SWITCHBOARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}

kube_version=$(grep -oE "k8s.io/kubernetes v[0-9.]+" "$root/hack/tools/kube-apiserver/go.mod" | head -1 | cut -d" " -f2)
etcd_version=$(grep -oE "go.etcd.io/etcd/server/v3 v[0-9.]+" "$root/hack/tools/etcd/go.mod" | head -1 | cut -d" " -f2)

log() { printf '[install-k8s] %s\n' "$*"; }

# build NAME VERSION MODULE_DIR LDFLAGS BINARY=PACKAGE... builds the packages of the tool module
# in MODULE_DIR into the cache (once) and links the binaries into bin_dir.
build() {
  local name=$1 version=$2 module_dir=$3 ldflags=$4
  shift 4
  local key out
  key=$(cat "$module_dir/go.mod" "$module_dir/go.sum" | sha256sum | cut -c1-12)
  out="$cache_root/$name-$version-$key"
  local want=()
  local pkg
  for pkg in "$@"; do want+=("$out/${pkg%%=*}"); done
  local missing=0 f
  for f in "${want[@]}"; do [ -x "$f" ] || missing=1; done
  if [ "$missing" = 0 ]; then
    log "$name $version: cached in $out"
  else
    log "$name $version: building $* (cold builds take minutes; Go's build cache makes rebuilds fast)"
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    local start=$SECONDS
    (cd "$module_dir" && for pkg in "$@"; do
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/${pkg%%=*}" "${pkg#*=}"
    done) &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      sleep 30
      kill -0 "$pid" 2>/dev/null && log "$name: still building ($((SECONDS - start))s)"
    done
    wait "$pid"
    rm -rf "$out" && mv "$out.tmp" "$out"
    log "$name $version: built in $((SECONDS - start))s"
  fi
  mkdir -p "$bin_dir"
  for f in "${want[@]}"; do ln -sfn "$f" "$bin_dir/$(basename "$f")"; done
}

kube_ldflags() {
  local v=${kube_version#v} key val
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  local date=1970-01-01T00:00:00Z
  for pair in "gitVersion=$kube_version" "gitMajor=$major" "gitMinor=$minor" \
      "gitTreeState=clean" "buildDate=$date"; do
    key=${pair%%=*} val=${pair#*=}
    printf -- "-X k8s.io/component-base/version.%s=%s -X k8s.io/client-go/pkg/version.%s=%s " "$key" "$val" "$key" "$val"
  done
}

build etcd "$etcd_version" "$root/hack/tools/etcd" "" etcd=go.etcd.io/etcd/server/v3
build kubernetes "$kube_version" "$root/hack/tools/kube-apiserver" "$(kube_ldflags)" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kubectl=k8s.io/kubernetes/cmd/kubectl \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
log "ready: $(ls "$bin_dir" | tr '\n' ' ')"
