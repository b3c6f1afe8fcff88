#!/usr/bin/env bash
# Installs the peer programs of make bench's proxy section from Debian's packages when
# they are missing: wrk (the load generator), nginx-light and haproxy (the proxies the
# gateway is measured beside). Without root or apt-get it says how and carries on: the
# bench leaves out the rows (or, without wrk, the section) it cannot measure.
set -euo pipefail

declare -A package=([wrk]=wrk [nginx]=nginx-light [haproxy]=haproxy)
missing=()
for bin in wrk nginx haproxy; do
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || missing+=("${package[$bin]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[bench-peers] missing ${missing[*]}: install them with apt-get install ${missing[*]} for the proxy section's rows" >&2
  exit 0
fi
echo "[bench-peers] installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  apt-get update >/dev/null 2>&1 || true
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    echo "[bench-peers] could not install ${missing[*]}; the proxy section leaves them out" >&2
fi
# The packages start their services; the bench runs its own instances.
for svc in nginx haproxy; do
  if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" >/dev/null 2>&1 || true; fi
  if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
done
