package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Names of the weighted-splitting scenario: Service split-a selects pods split-a-0 and
// split-a-1, Service split-b selects pod split-b-0; all three serve splitModel.
const (
	splitModel   = "split-model"
	splitRoute   = "split"
	splitVersion = "x-e2e-split-version" // set by the route's ResponseHeaderModifier
)

// splitPods are the endpoints behind each of the two Services.
var splitPods = map[string][]string{
	"split-a": {pod("split-a-0"), pod("split-a-1")},
	"split-b": {pod("split-b-0")},
}

// weightedSplit: a rule with backends split-a and split-b weighted 90/10 sends each
// request to a backend drawn by weight: over 1,000 requests split-a's pods serve 90% ±5
// points. Once split-b's weight is 0 it is drained: no request reaches its pod, although
// the pod stays ready.
func weightedSplit() {
	hosts := map[string]string{"split-a-0": "127.0.0.41", "split-a-1": "127.0.0.42", "split-b-0": "127.0.0.43"}
	for name, host := range hosts {
		svc := name[:len("split-x")]
		addr := sys.startEngine(GinkgoTB(), host, splitModel)
		p := sys.cluster.EnginePod(GinkgoTB(), ns, name, splitModel, addr, map[string]string{"app": svc})
		DeferCleanup(func() { _ = sys.cluster.Delete(context.Background(), p) })
	}
	_, err := sys.kubectlApply(fmt.Sprintf(`apiVersion: inference.switchboard.dev/v1alpha1
kind: RoutingPolicy
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  strategy: least-request
---
apiVersion: v1
kind: Service
metadata:
  name: split-a
  namespace: %[2]s
spec:
  selector: {app: split-a}
  ports:
  - {name: http, port: 8000, targetPort: http}
---
apiVersion: v1
kind: Service
metadata:
  name: split-b
  namespace: %[2]s
spec:
  selector: {app: split-b}
  ports:
  - {name: http, port: 8000, targetPort: http}
`, splitRoute, ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		_, _ = sys.kubectl("delete", "httproute,rp", splitRoute, "-n", ns, "--ignore-not-found")
		_, _ = sys.kubectl("delete", "service", "split-a", "split-b", "-n", ns, "--ignore-not-found")
	})
	applySplit := func(version string, a, b int) {
		_, err := sys.kubectlApply(fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  parentRefs:
  - name: gw
  rules:
  - matches:
    - headers: [{name: %[3]s, value: %[1]s}]
    filters:
    - type: ExtensionRef
      extensionRef: {group: inference.switchboard.dev, kind: RoutingPolicy, name: %[1]s}
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: %[4]s, value: "%[5]s"}]
    backendRefs:
    - {name: split-a, port: 8000, weight: %[6]d}
    - {name: split-b, port: 8000, weight: %[7]d}
`, splitRoute, ns, routeHdr, splitVersion, version, a, b))
		Expect(err).NotTo(HaveOccurred())
	}
	applySplit("90-10", 90, 10)
	Eventually(func() []string { return sys.routable(splitModel) }).Should(HaveLen(3))

	c := sys.client(splitRoute)
	// The gateway serves the route and knows every pod of both Services once a batch of
	// requests of this version has reached all three.
	Eventually(func(g Gomega) {
		counts := splitBurst(g, "90-10", 60, 4)
		g.Expect(counts).To(HaveLen(3), "warm-up: %v", counts)
	}).Should(Succeed())

	const n = 1000
	counts := splitBurst(Default, "90-10", n, 8)
	a, b := splitShare(counts, "split-a"), splitShare(counts, "split-b")
	logf("weighted split 90/10 over %d requests: split-a %d (%.1f%%: %v), split-b %d (%.1f%%: %v)",
		n, a, pct(a, n), pick(counts, splitPods["split-a"]), b, pct(b, n), pick(counts, splitPods["split-b"]))
	Expect(a+b).To(Equal(n), "requests served outside the route's backends: %v", counts)
	Expect(pct(a, n)).To(BeNumerically("~", 90, 5), "split-a's share: %v", counts)
	Expect(pct(b, n)).To(BeNumerically("~", 10, 5), "split-b's share: %v", counts)

	// Weight 0 drains split-b. The new version's response header says when the gateway
	// serves the changed rule.
	applySplit("100-0", 1, 0)
	Eventually(func(g Gomega) {
		a := chat(c, splitModel, "which version?", 2)
		g.Expect(a.err).NotTo(HaveOccurred())
		g.Expect(a.header.Get(splitVersion)).To(Equal("100-0"))
	}).Should(Succeed())
	drained := splitBurst(Default, "100-0", 100, 8)
	logf("weighted split 1/0 over 100 requests: split-a %d %v, split-b %d",
		splitShare(drained, "split-a"), pick(drained, splitPods["split-a"]), splitShare(drained, "split-b"))
	Expect(splitShare(drained, "split-b")).To(BeZero(), "requests reached the drained backend: %v", drained)
	Expect(splitShare(drained, "split-a")).To(Equal(100), "%v", drained)
	Expect(sys.routable(splitModel)).To(ContainElement(pod("split-b-0")), "the drained backend's pod is still ready")
}

// splitBurst sends n requests on the split route, concurrency at a time, each of which
// must succeed and carry the route version's header, and returns how many each endpoint
// served.
func splitBurst(g Gomega, version string, n, concurrency int) map[string]int {
	c := sys.client(splitRoute)
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		failed []string
		next   = make(chan int)
		wg     sync.WaitGroup
	)
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				a := chat(c, splitModel, fmt.Sprintf("split request %d", i), 2)
				mu.Lock()
				switch {
				case a.err != nil:
					failed = append(failed, fmt.Sprintf("request %d: %v", i, a.err))
				case a.header.Get(splitVersion) != version:
					failed = append(failed, fmt.Sprintf("request %d: route version %q, want %q", i, a.header.Get(splitVersion), version))
				default:
					counts[a.endpoint]++
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	g.Expect(failed).To(BeEmpty(), "%d of %d requests failed:\n%s", len(failed), n, strings.Join(failed, "\n"))
	return counts
}

// splitShare returns how many requests in counts the pods of Service svc served.
func splitShare(counts map[string]int, svc string) int {
	total := 0
	for _, p := range splitPods[svc] {
		total += counts[p]
	}
	return total
}

// pick returns the counts of pods only.
func pick(counts map[string]int, pods []string) map[string]int {
	out := map[string]int{}
	for _, p := range pods {
		out[p] = counts[p]
	}
	return out
}

// pct returns k as a percentage of n.
func pct(k, n int) float64 { return 100 * float64(k) / float64(n) }
