package e2e

import (
	"context"
	"fmt"
	"net"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// poolName names the InferencePool scenario's pool, its route (routeHdr value) and its
// pods' label.
const poolName = "pool"

// inferencePoolRoute: an HTTPRoute whose backendRef is an InferencePool is served by the
// gateway process with the RoutingPolicy the pool's annotation names (round-robin:
// strictly alternating between the pool's two pods, never a pod of the namespace outside
// it), and the manager process writes the Gateway into the pool's status.parents,
// Accepted and ResolvedRefs, as kubectl shows.
func inferencePoolRoute() {
	first := sys.startEngine(GinkgoTB(), "127.0.0.46", model)
	_, port, err := net.SplitHostPort(first)
	Expect(err).NotTo(HaveOccurred())
	second := net.JoinHostPort("127.0.0.47", port)
	sys.runEngine(GinkgoTB(), second, model)
	for i, addr := range []string{first, second} {
		p := sys.cluster.EnginePod(GinkgoTB(), ns, fmt.Sprintf("pool-%d", i), model, addr, map[string]string{"pool": poolName})
		DeferCleanup(func() { _ = sys.cluster.Delete(context.Background(), p) })
	}
	_, err = sys.kubectlApply(fmt.Sprintf(`apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: %[1]s
  namespace: %[2]s
  annotations: {inference.switchboard.dev/routing-policy: rr}
spec:
  selector:
    matchLabels: {pool: %[1]s}
  targetPorts:
  - number: %[3]s
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  parentRefs:
  - name: gw
  rules:
  - matches:
    - headers: [{name: %[4]s, value: %[1]s}]
    backendRefs:
    - {group: inference.networking.k8s.io, kind: InferencePool, name: %[1]s}
`, poolName, ns, port, routeHdr))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		_, _ = sys.kubectl("delete", "httproute,inferencepool", poolName, "-n", ns, "--ignore-not-found")
	})

	c := sys.client(poolName)
	Eventually(func(g Gomega) {
		g.Expect(chat(c, model, "hello pool", 2).err).NotTo(HaveOccurred())
	}).Should(Succeed())
	var endpoints []string
	for range 10 {
		a := chat(c, model, "which pod?", 2)
		Expect(a.err).NotTo(HaveOccurred())
		endpoints = append(endpoints, a.endpoint)
	}
	logf("InferencePool route, round-robin: %v", endpoints)
	for i, ep := range endpoints {
		Expect(ep).To(BeElementOf(pod("pool-0"), pod("pool-1")), "request %d went outside the pool", i)
		if i > 0 {
			Expect(ep).NotTo(Equal(endpoints[i-1]), "round-robin did not alternate: %v", endpoints)
		}
	}

	Eventually(func() (string, error) {
		return sys.kubectl("get", "inferencepool", poolName, "-n", ns, "-o",
			`jsonpath={range .status.parents[*]}{.parentRef.kind}/{.parentRef.name} {.controllerName}{range .conditions[*]} {.type}={.status}{end}{end}`)
	}).Should(Equal("Gateway/gw switchboard.dev/gateway-controller Accepted=True ResolvedRefs=True"))
}
