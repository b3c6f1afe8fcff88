#!/usr/bin/env bash
# The whole system on one machine (DESIGN §9): the local control plane, a Deployment of three
# simulated vLLM engines run by the pod runner, the manager, the gateway and the metadata service, the samples of
# config/samples, then sample traffic and a report.
#
#   hack/demo.sh        start, send sample traffic, print a report, run until Ctrl-C
#   DEMO_EXIT=1 hack/demo.sh    the same, but stop everything after the report
#   hack/demo.sh down   stop a running demo from another shell
#
# Addresses (all on loopback):
#   gateway          Gateway listener http://127.0.0.1:8080 (OpenAI API under /v1),
#                    ext_proc 127.0.0.1:9002, metrics 127.0.0.1:8081, probes 127.0.0.1:8082
#   manager          metrics 127.0.0.1:8083, probes 127.0.0.1:8084
#   metadata-service API http://127.0.0.1:8090, metrics 127.0.0.1:8091, probes 127.0.0.1:8092
#   pod-runner       probes 127.0.0.1:8085, kubelet API (kubectl logs) 127.0.0.1:10250; runs the pods of Deployment llama-3-8b as engine-sim
#                    processes on 127.0.0.11:8000, 127.0.0.12:8000, 127.0.0.13:8000
#   control plane    kube-apiserver 127.0.0.1:6443, etcd 127.0.0.1:2379-2380, kube-controller-manager
#                    127.0.0.1:10257 (hack/cluster.sh)
#
# Logs and state are in bin/demo: one <process>.log per process, and bin/demo/pids lists the
# processes the demo started ("pid name" per line, the demo script itself first). Stopping
# (Ctrl-C, DEMO_EXIT=1, a failure, or "down") ends only those processes, and the control plane
# only if the demo started it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
state=$bin/demo
pidfile=$state/pids
kubeconfig=$bin/kubeconfig
kubectl="$bin/k8s/kubectl --kubeconfig $kubeconfig"
model=llama-3-8b
adapter=llama-3-8b-sql-lora
engines=(127.0.0.11:8000 127.0.0.12:8000 127.0.0.13:8000)
time_scale=${DEMO_TIME_SCALE:-0.2}
timeout_s=${DEMO_TIMEOUT:-120}
gw=http://127.0.0.1:8080
md=http://127.0.0.1:8090

log() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] ERROR: %s\n' "$*" >&2; exit 1; }

# ours PID NAME: the process PID is alive and runs bin/NAME (or, for "demo", this script), so
# that a recycled PID is never signalled.
ours() {
  local pid=$1 name=$2 cmd
  kill -0 "$pid" 2>/dev/null || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  if [ "$name" = demo ]; then [[ $cmd == *hack/demo.sh* ]]; else [[ $cmd == *"$bin/$name "* ]]; fi
}

# stop_pids: ends every process listed in the pid file (except the demo script), last
# started first, with SIGTERM and, after 15 s, SIGKILL.
stop_pids() {
  [ -f "$pidfile" ] || return 0
  local pid name lines=()
  mapfile -t lines < <(tac "$pidfile")
  for line in "${lines[@]}"; do
    read -r pid name <<<"$line"
    [ "$name" = demo ] && continue
    if ours "$pid" "$name"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for line in "${lines[@]}"; do
    read -r pid name <<<"$line"
    [ "$name" = demo ] && continue
    for _ in $(seq 1 75); do ours "$pid" "$name" || break; sleep 0.2; done
    if ours "$pid" "$name"; then kill -KILL "$pid" 2>/dev/null || true; log "killed $name (pid $pid)"; else log "stopped $name (pid $pid)"; fi
  done
}

stop_cluster() {
  if [ -f "$state/cluster-started" ]; then
    "$root/hack/cluster.sh" down
    rm -f "$state/cluster-started"
  fi
}

down() {
  local pid name
  if [ -f "$pidfile" ]; then
    read -r pid name <"$pidfile"
    if [ "$name" = demo ] && ours "$pid" demo; then
      log "asking the running demo (pid $pid) to stop"
      kill -TERM "$pid"
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && die "the demo (pid $pid) did not stop within 60 s"
    fi
  fi
  stop_pids
  stop_cluster
  rm -f "$pidfile"
  log "demo stopped"
}

if [ "${1:-}" = down ]; then down; exit 0; fi
[ $# -eq 0 ] || { echo "usage: $0 [down]" >&2; exit 2; }

# ---------------------------------------------------------------------------- pre-flight
mkdir -p "$state"
if [ -f "$pidfile" ]; then
  while read -r pid name; do
    if ours "$pid" "$name"; then die "a demo is already running ($name, pid $pid): stop it with 'make demo-down'"; fi
  done <"$pidfile"
  rm -f "$pidfile"
fi

# busy HOST PORT: something accepts connections on HOST:PORT.
busy() { timeout 1 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }
ports=(127.0.0.1:8080 127.0.0.1:9002 127.0.0.1:8081 127.0.0.1:8082 127.0.0.1:8083 127.0.0.1:8084
  127.0.0.1:8085 127.0.0.1:10250 127.0.0.1:8090 127.0.0.1:8091 127.0.0.1:8092 "${engines[@]}")
for addr in "${ports[@]}"; do
  if busy "${addr%:*}" "${addr#*:}"; then
    die "$addr is already in use (see: ss -ltnp | grep ${addr#*:}); free it or stop the demo with 'make demo-down'"
  fi
done
cluster_running=false
"$root/hack/cluster.sh" status | grep -q 'kube-apiserver running' && cluster_running=true
if ! $cluster_running; then
  for port in 6443 2379 2380; do
    busy 127.0.0.1 "$port" && die "127.0.0.1:$port is in use by a process hack/cluster.sh did not start; free it first"
  done
fi

# From here on, everything this script started is stopped when it exits, however it exits.
echo "$$ demo" >"$pidfile"
cleanup() {
  local rc=$?
  set +e
  trap - EXIT; trap "" INT TERM
  log "stopping everything the demo started"
  stop_pids
  stop_cluster
  # Last: until the pid file is gone, a new demo refuses to start.
  rm -f "$pidfile"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'log "SIGTERM received"; exit 0' TERM

# ---------------------------------------------------------------------------- build
log "building the binaries (make build)"
make -C "$root" --no-print-directory build
if $cluster_running; then
  log "using the control plane that is already running (the demo will leave it running)"
else
  log "starting the control plane (make cluster-up; the first run builds kube-apiserver, etcd and kubectl, which takes several minutes)"
  touch "$state/cluster-started"
  make -C "$root" --no-print-directory cluster-up
fi

# ---------------------------------------------------------------------------- helpers
# start NAME ARGS...: runs bin/NAME in its own session with its output in bin/demo/NAME.log.
start() {
  local name=$1; shift
  local logf=$state/$name.log
  setsid "$bin/${name%%-[0-9]}" "$@" >"$logf" 2>&1 </dev/null &
  echo "$! ${name%%-[0-9]}" >>"$pidfile"
  eval "pid_${name//-/_}=$!"
  log "started $name (pid $!, log: $logf)"
}

# wait_until DESC NAME CMD...: polls CMD every 0.5 s until it succeeds; fails after timeout_s
# seconds, or as soon as process NAME (started with start) has exited, naming its log.
wait_until() {
  local desc=$1 name=$2; shift 2
  local var="pid_${name//-/_}" deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    if [ -n "${!var:-}" ] && ! kill -0 "${!var}" 2>/dev/null; then
      tail -n 20 "$state/$name.log" >&2 || true
      die "$name exited while waiting for: $desc (log: $state/$name.log)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 20 "$state/$name.log" >&2 || true
      die "timed out after ${timeout_s}s waiting for: $desc (log: $state/$name.log)"
    fi
    sleep 0.5
  done
}

ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }
answers() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1")" != 000 ]; }
routable() { [ "$(curl -fsS --max-time 2 "$md/v1/endpoints" | grep -o '"routable": *true' | wc -l)" -ge "$1" ]; }
adapter_ready() {
  local n
  n=$($kubectl get ma "$adapter" -o jsonpath='{.status.readyReplicas}')
  [ "${n:-0}" -ge 1 ] || return 1
  # The gateway routes an adapter to the engines that list it, read every second.
  curl -fsS --max-time 2 "$gw/v1/models" | grep -q "\"$adapter\""
}

# ---------------------------------------------------------------------------- cluster objects
log "creating namespace switchboard-system (the manager's leader-election lease) and applying config/samples"
$kubectl create namespace switchboard-system --dry-run=client -o yaml | $kubectl apply -f - >/dev/null
$kubectl apply -k "$root/config/samples"

# ---------------------------------------------------------------------------- engines
# The pod runner plays kubelet for the local Node: it runs the Deployment's pods, which
# kube-controller-manager creates, as engine-sim processes on 127.0.0.11-13, and reports
# their status as they start, get ready and exit.
start pod-runner --kubeconfig "$kubeconfig" --bin-dir "$bin" --state-dir "$state/pods" \
  --pod-ip-range "${engines[0]%:*}-${engines[-1]%:*}" --health-probe-bind-address 127.0.0.1:8085
wait_until "pod-runner ready (127.0.0.1:8085/readyz)" pod-runner ok http://127.0.0.1:8085/readyz
# Engine pods an earlier version of the demo registered by hand have no ReplicaSet.
$kubectl delete pod -l "app=$model,!pod-template-hash" --ignore-not-found >/dev/null
log "deploying $model: a Deployment of ${#engines[@]} engine-sim pods (labels app=$model, switchboard.dev/model=$model, switchboard.dev/port=8000)"
$kubectl apply -f - >/dev/null <<DEPLOYMENT
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $model
  namespace: default
  labels: {app: $model}
spec:
  replicas: ${#engines[@]}
  selector:
    matchLabels: {app: $model}
  template:
    metadata:
      labels: {app: $model, switchboard.dev/model: $model, switchboard.dev/port: "8000"}
    spec:
      containers:
      - name: engine
        image: switchboard/engine-sim
        args: [--model, $model, --max-num-seqs, "32", --time-scale, "$time_scale"]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe:
          httpGet: {path: /health, port: 8000}
          periodSeconds: 1
DEPLOYMENT
wait_until "deployment $model available (${#engines[@]} ready pods)" pod-runner \
  $kubectl rollout status deployment/$model --timeout=2s
$kubectl get pods -l app=$model -o custom-columns=POD:.metadata.name,IP:.status.podIP,READY:.status.containerStatuses[0].ready --no-headers |
  while read -r pod ip ready; do log "pod $pod -> $ip:8000 (ready: $ready)"; done

# ---------------------------------------------------------------------------- switchboard
# The manager writes into the Gateways' status what the gateway reports it cannot bind
# (the gateway's metrics endpoint, 127.0.0.1:8081).
start manager --kubeconfig "$kubeconfig" --leader-election-namespace switchboard-system \
  --gateway-status-endpoints 127.0.0.1:8081 \
  --metrics-bind-address 127.0.0.1:8083 --health-probe-bind-address 127.0.0.1:8084
# The gateway serves the sample Gateway on the address it asks for (spec.addresses
# 127.0.0.1); the ext_proc picker chooses among the engine pods of namespace default.
start gateway --kubeconfig "$kubeconfig" --ext-proc-bind-address 127.0.0.1:9002 --ext-proc-namespace default \
  --metrics-bind-address 127.0.0.1:8081 --health-probe-bind-address 127.0.0.1:8082
start metadata-service --kubeconfig "$kubeconfig" --bind-address 127.0.0.1:8090 \
  --metrics-bind-address 127.0.0.1:8091 --health-probe-bind-address 127.0.0.1:8092

wait_until "manager ready (127.0.0.1:8084/readyz)" manager ok http://127.0.0.1:8084/readyz
wait_until "gateway ready (127.0.0.1:8082/readyz)" gateway ok http://127.0.0.1:8082/readyz
wait_until "metadata-service ready (127.0.0.1:8092/readyz)" metadata-service ok http://127.0.0.1:8092/readyz
wait_until "the Gateway listener answering on $gw" gateway answers "$gw/"
wait_until "3 routable engine endpoints in $md/v1/endpoints" metadata-service routable 3
log "ready"

# ---------------------------------------------------------------------------- traffic
report=()
# call NAME PATH [BODY]: sends BODY (POST) or nothing (GET) to the gateway's PATH; leaves the
# response body in $state/NAME.json and headers in $state/NAME.headers, and records the
# routing in the report.
call() {
  local name=$1 path=$2 code endpoint deadline=$((SECONDS + 30))
  local data=()
  [ $# -ge 3 ] && data=(-H 'content-type: application/json' -d "$3")
  while :; do
    code=$(curl -sS -D "$state/$name.headers" -o "$state/$name.json" -w '%{http_code}' --max-time 60 \
      "${data[@]}" "$gw$path") || code=000
    # A 503 right after start means the gateway has not scraped every engine yet.
    [ "$code" = 503 ] && [ $SECONDS -lt $deadline ] || break
    sleep 1
  done
  endpoint=$(tr -d '\r' <"$state/$name.headers" | sed -n 's/^x-switchboard-endpoint: *//Ip' | head -1)
  report+=("$(printf '%-22s %-22s HTTP %s  x-switchboard-endpoint: %s' "$name" "$path" "$code" "${endpoint:--}")")
  if [ "$code" != 200 ]; then
    cat "$state/$name.json" >&2
    die "$name: the gateway answered HTTP $code (logs: $state/gateway.log, $state/pods/*/engine.log)"
  fi
}
# chat NAME BODY: call NAME on the chat completions API with BODY.
chat() { call "$1" /v1/chat/completions "$2"; }
# reply FILE: the assistant message of a non-streaming response, still JSON-escaped.
reply() { sed -nE 's/.*"content": *"(([^"\\]|\\.)*)".*/\1/p' "$1" | head -1; }

log "sending sample traffic through $gw"
chat chat "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello to Switchboard.\"}],\"max_tokens\":24}"
chat chat-stream "{\"model\":\"$model\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Stream a short poem about routers.\"}],\"max_tokens\":24}"
chunks=$(grep -c '^data: ' "$state/chat-stream.json" || true)
report[-1]+="  ($chunks SSE events$(grep -q '^data: \[DONE\]' "$state/chat-stream.json" && echo ', ends with [DONE]'))"

system="You are a meticulous database assistant for the Switchboard sales warehouse. Tables: orders(id, customer_id, total, created_at), customers(id, name, region), items(order_id, sku, qty, price). Always answer with one SQL query and a one-line explanation."
messages="{\"role\":\"system\",\"content\":\"$system\"}"
turns=("Which region had the most orders last month?" "Now break that down by week." "And show only weeks with more than 100 orders.")
for t in 0 1 2; do
  messages+=",{\"role\":\"user\",\"content\":\"${turns[$t]}\"}"
  chat "conversation-turn-$((t + 1))" "{\"model\":\"$model\",\"messages\":[$messages],\"max_tokens\":32}"
  messages+=",{\"role\":\"assistant\",\"content\":\"$(reply "$state/conversation-turn-$((t + 1)).json")\"}"
done

wait_until "ModelAdapter $adapter READY >= 1 and listed by $gw/v1/models" manager adapter_ready
chat adapter "{\"model\":\"$adapter\",\"messages\":[{\"role\":\"user\",\"content\":\"List the ten largest orders.\"}],\"max_tokens\":24}"
call embeddings /v1/embeddings "{\"model\":\"$model\",\"input\":[\"orders by region\",\"orders by week\"]}"
report[-1]+="  ($(grep -o '"index"' "$state/embeddings.json" | wc -l) vectors)"
call models /v1/models
report[-1]+="  ($(grep -o '"id": *"[^"]*"' "$state/models.json" | sed 's/"id": *//' | tr -d '"' | paste -sd, -))"

# ---------------------------------------------------------------------------- report
# hit_rate ADDR: prefix-cache hits / queries (tokens) from the engine's vLLM metrics.
hit_rate() {
  curl -fsS --max-time 2 "http://$1/metrics" | awk '
    $1 ~ /^vllm:prefix_cache_hits_total/ { h += $NF }
    $1 ~ /^vllm:prefix_cache_queries_total/ { q += $NF }
    END { if (q > 0) printf "%5.1f%%  (%d of %d prompt tokens)", 100 * h / q, h, q; else print "n/a (no queries)" }'
}

echo
echo "==================================================================== Switchboard demo report"
echo "Requests through the gateway $gw (bodies and headers in $state/<name>.json|.headers):"
printf '  %s\n' "${report[@]}"
echo
echo "Engine prefix-cache hit rate (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total):"
$kubectl get pods -l app=$model -o custom-columns=POD:.metadata.name,IP:.status.podIP --no-headers |
  while read -r pod ip; do printf '  %-30s %-18s %s\n' "$pod" "$ip:8000" "$(hit_rate "$ip:8000")"; done
echo
echo "GET $md/v1/models:"
curl -fsS --max-time 5 "$md/v1/models" | sed 's/^/  /'
echo
echo
echo "$ kubectl get gatewayclass,gateway,httproute,rp,ma -A"
$kubectl get gatewayclass,gateway,httproute,rp,ma -A | sed 's/^/  /'
echo
echo "Logs: $(cd "$state" && printf "$state/%s " *.log)"
echo "==================================================================================="

if [ "${DEMO_EXIT:-0}" = 1 ]; then
  log "DEMO_EXIT=1: stopping"
  exit 0
fi

cat <<EOF

The demo is running. Try, from another shell:

  curl -sD - $gw/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"$model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'
  curl -sN $gw/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"$model","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'
  curl -sD - $gw/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"$adapter","messages":[{"role":"user","content":"Top 10 customers by revenue"}]}'
  curl -s $gw/v1/models
  curl -s $gw/v1/embeddings -H 'content-type: application/json' -d '{"model":"$model","input":"hello"}'
  curl -s $md/v1/endpoints
  curl -s http://127.0.0.1:8081/metrics | grep switchboard_gateway_requests
  curl -s http://${engines[0]}/metrics | grep prefix_cache

  export KUBECONFIG=$kubeconfig
  $bin/k8s/kubectl get gatewayclass,gateway,httproute,rp,ma,pods -A
  $bin/k8s/kubectl describe rp prefix-cache
  $bin/k8s/kubectl patch rp prefix-cache --type=merge -p '{"spec":{"strategy":"least-request"}}'

Ctrl-C (or 'make demo-down' from another shell) stops everything the demo started.
EOF

# Run until interrupted; stop early if a process dies.
while :; do
  while read -r pid name; do
    [ "$name" = demo ] && continue
    kill -0 "$pid" 2>/dev/null || die "$name (pid $pid) exited; see $state/$name*.log"
  done <"$pidfile"
  sleep 1
done
