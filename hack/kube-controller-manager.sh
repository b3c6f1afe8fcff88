#!/usr/bin/env bash
# Runs kube-controller-manager for the local control plane in the foreground, with the
# controllers that make sense without kubelets, a scheduler or a cloud: Deployments get
# ReplicaSets and ReplicaSets get Pods (bound and run by cmd/pod-runner), deleted owners
# take their dependents, deleted namespaces empty and go, and every namespace gets its
# default ServiceAccount. EndpointSlice controllers are off: the API server rejects the
# loopback addresses the local pods have.
#
#   hack/kube-controller-manager.sh KUBECONFIG [SECURE_PORT]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s=${KUBEBUILDER_ASSETS:-$root/bin/k8s}
kubeconfig=${1:?usage: $0 KUBECONFIG [SECURE_PORT]}
port=${2:-10257}

controllers=(
  deployment-controller replicaset-controller statefulset-controller job-controller
  ttl-after-finished-controller garbage-collector-controller namespace-controller
  serviceaccount-controller pod-garbage-collector-controller
)

exec "$k8s/kube-controller-manager" --kubeconfig "$kubeconfig" \
  --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --authentication-skip-lookup \
  --controllers "$(IFS=,; echo "${controllers[*]}")" \
  --leader-elect=false --use-service-account-credentials=false \
  --bind-address 127.0.0.1 --secure-port "$port"
