// Package conformance runs the upstream Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, profile GATEWAY-HTTP) against Switchboard's
// manager and gateway on a local control plane: envtest's kube-apiserver and etcd,
// kube-controller-manager (hack/kube-controller-manager.sh) and cmd/pod-runner, which
// runs the suite's echo-basic pods as local processes on loopback addresses.
//
// `make conformance` runs it and writes the suite's report to docs/conformance/; plain
// `go test` skips it.
package conformance
