#!/usr/bin/env bash
# Local control plane: etcd, kube-apiserver and kube-controller-manager as processes on
# loopback, RBAC on, with an admin kubeconfig at bin/kubeconfig. "up" starts them (idempotent)
# and installs the CRDs; "down" stops exactly the processes that "up" started, found by the pid
# files under bin/cluster.
#
#   hack/cluster.sh up|down|status
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s=$root/bin/k8s
state=${CLUSTER_DIR:-$root/bin/cluster}
kubeconfig=${KUBECONFIG_OUT:-$root/bin/kubeconfig}
api_port=${APISERVER_PORT:-6443}
etcd_port=${ETCD_PORT:-2379}
kcm_port=${CONTROLLER_MANAGER_PORT:-10257}
kubectl="$k8s/kubectl --kubeconfig $kubeconfig"

log() { printf '[cluster] %s\n' "$*"; }

running() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

stop() {
  local name=$1
  if running "$name"; then
    local pid
    pid=$(cat "$state/$name.pid")
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$state/$name.pid"
}

certs() {
  [ -f "$state/pki/ca.crt" ] && return
  log "generating certificates and service-account keys in $state/pki"
  mkdir -p "$state/pki" && cd "$state/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=switchboard-local-ca" \
    -keyout ca.key -out ca.crt 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key \
    -out apiserver.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' > san.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile san.ext -out apiserver.crt 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=switchboard-admin" \
    -keyout admin.key -out admin.csr 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -out admin.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cd - >/dev/null
}

write_kubeconfig() {
  mkdir -p "$(dirname "$kubeconfig")"
  cat > "$kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: switchboard-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $state/pki/ca.crt
users:
- name: switchboard-admin
  user:
    client-certificate: $state/pki/admin.crt
    client-key: $state/pki/admin.key
contexts:
- name: switchboard-local
  context: {cluster: switchboard-local, user: switchboard-admin, namespace: default}
current-context: switchboard-local
KCFG
}

up() {
  [ -x "$k8s/kube-controller-manager" ] || "$root/hack/install-k8s.sh"
  mkdir -p "$state"
  certs
  if ! running etcd; then
    log "starting etcd on 127.0.0.1:$etcd_port (log: $state/etcd.log)"
    setsid "$k8s/etcd" --data-dir "$state/etcd-data" --name local \
      --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
      --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
      --initial-cluster "local=http://127.0.0.1:$((etcd_port + 1))" \
      --unsafe-no-fsync >"$state/etcd.log" 2>&1 < /dev/null &
    echo $! > "$state/etcd.pid"
  fi
  if ! running kube-apiserver; then
    log "starting kube-apiserver on https://127.0.0.1:$api_port (log: $state/kube-apiserver.log)"
    setsid "$k8s/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
      --endpoint-reconciler-type none --authorization-mode RBAC \
      --client-ca-file "$state/pki/ca.crt" \
      --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
      --service-account-issuer https://kubernetes.default.svc \
      --service-account-key-file "$state/pki/sa.pub" --service-account-signing-key-file "$state/pki/sa.key" \
      --service-cluster-ip-range 10.96.0.0/16 \
      --disable-admission-plugins ServiceAccount \
      --allow-privileged=true >"$state/kube-apiserver.log" 2>&1 < /dev/null &
    echo $! > "$state/kube-apiserver.pid"
  fi
  write_kubeconfig
  log "waiting for the API server to be ready"
  for i in $(seq 1 120); do
    if $kubectl get --raw /readyz >/dev/null 2>&1; then break; fi
    running kube-apiserver || { log "kube-apiserver exited; last log lines:"; tail -20 "$state/kube-apiserver.log"; exit 1; }
    [ "$i" = 120 ] && { log "API server not ready after 60s"; exit 1; }
    sleep 0.5
  done
  if ! running kube-controller-manager; then
    log "starting kube-controller-manager on https://127.0.0.1:$kcm_port (log: $state/kube-controller-manager.log)"
    setsid "$root/hack/kube-controller-manager.sh" "$kubeconfig" "$kcm_port" \
      >"$state/kube-controller-manager.log" 2>&1 < /dev/null &
    echo $! > "$state/kube-controller-manager.pid"
  fi
  log "installing CRDs (Switchboard, Gateway API, Inference Extension)"
  $kubectl apply --server-side -k "$root/config/crd" >/dev/null
  $kubectl apply --server-side -k "$root/config/crd/gateway-api" >/dev/null
  $kubectl apply --server-side -k "$root/config/crd/inference-extension" >/dev/null
  $kubectl wait --for condition=Established crd --all --timeout=60s >/dev/null
  log "ready: export KUBECONFIG=$kubeconfig"
}

case "${1:-}" in
  up) up ;;
  down) stop kube-controller-manager; stop kube-apiserver; stop etcd ;;
  status) for p in etcd kube-apiserver kube-controller-manager; do running "$p" && log "$p running (pid $(cat "$state/$p.pid"))" || log "$p stopped"; done ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
