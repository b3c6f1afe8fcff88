package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Names of the tenant-isolation scenario: a second tenant, team-b, whose engine serves a
// model of its own.
const (
	tenantNS     = "team-b"
	secretModel  = "secret-model"
	secretSvc    = "secret-svc"
	secretPod    = tenantNS + "/secret-0"
	leakHost     = "leak.example"
	leakRoute    = "leak"
	leakGrant    = "e2e-routes-to-services"
	leakPlain    = "plain" // routeHdr of the leak route's rule without a policy
	leakNoTarget = "none"  // routeHdr of the leak route's rule without backendRefs
)

// tenantIsolation: an HTTPRoute of the suite's namespace names team-b's Service as its
// only backend. Without a ReferenceGrant in team-b the gateway never sends to team-b's
// pod, answers 500 and the route reports ResolvedRefs=False RefNotPermitted; the suite's
// own routes do not serve team-b's model either. Once team-b grants HTTPRoutes of the
// suite's namespace access to its Services, the route serves from team-b's pod and
// reports ResolvedRefs=True. A rule without backendRefs answers 500 throughout.
func tenantIsolation() {
	_, err := sys.kubectlApply(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Service
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  selector:
    app: secret
  ports:
  - name: http
    port: 8000
    targetPort: http
`, tenantNS, secretSvc))
	Expect(err).NotTo(HaveOccurred())
	addr := sys.startEngine(GinkgoTB(), "127.0.0.31", secretModel)
	secret := sys.cluster.EnginePod(GinkgoTB(), tenantNS, "secret-0", secretModel, addr, map[string]string{"app": "secret"})
	DeferCleanup(func() { _ = sys.cluster.Delete(context.Background(), secret) })
	Eventually(func() []string { return sys.routable(secretModel) }).Should(ConsistOf(secretPod))

	_, err = sys.kubectlApply(fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  parentRefs:
  - name: gw
  hostnames: [%[3]s]
  rules:
  - filters:
    - type: ExtensionRef
      extensionRef: {group: inference.switchboard.dev, kind: RoutingPolicy, name: lr}
    backendRefs:
    - {name: %[4]s, namespace: %[5]s, port: 8000}
  - matches:
    - headers: [{name: %[6]s, value: %[7]s}]
    backendRefs:
    - {name: %[4]s, namespace: %[5]s, port: 8000}
  - matches:
    - headers: [{name: %[6]s, value: %[8]s}]
`, leakRoute, ns, leakHost, secretSvc, tenantNS, routeHdr, leakPlain, leakNoTarget))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _, _ = sys.kubectl("delete", "httproute", leakRoute, "-n", ns, "--ignore-not-found") })

	inference, plain, none := leakClient(""), leakClient(leakPlain), leakClient(leakNoTarget)
	notLeaked := func(g Gomega, a answer, what string) {
		g.Expect(a.endpoint).NotTo(Equal(secretPod), "%s reached team-b's pod without a ReferenceGrant", what)
	}
	// Until the gateway has the route, leak.example takes the suite's default route.
	Eventually(func(g Gomega) {
		for what, c := range map[string]openai.Client{"the policy rule": inference, "the plain rule": plain} {
			a := chat(c, secretModel, "Tell me team-b's secrets.", 4)
			notLeaked(g, a, what)
			g.Expect(a.status).To(Equal(http.StatusInternalServerError), "%s: %v", what, a.err)
		}
	}).Should(Succeed())
	for i := range 20 {
		for what, c := range map[string]openai.Client{"the policy rule": inference, "the plain rule": plain} {
			a := chat(c, secretModel, fmt.Sprintf("Secret %d, please.", i), 4)
			notLeaked(Default, a, what)
			Expect(a.status).To(Equal(http.StatusInternalServerError), "request %d on %s: %v", i, what, a.err)
			Expect(a.code()).To(Equal("invalid_backend"), "request %d on %s", i, what)
		}
	}
	Eventually(func(g Gomega) {
		g.Expect(sys.resolvedRefs(leakRoute)).To(Equal("False RefNotPermitted"))
	}).Should(Succeed())

	// The suite's own routes have their namespace's Service as backend: team-b's model is
	// not served on them, whatever the cache knows about it.
	for _, route := range []string{"", "lr", "rr"} {
		a := chat(sys.client(route), secretModel, "Anything from team-b?", 4)
		Expect(a.endpoint).NotTo(Equal(secretPod), "route %q", route)
		Expect(a.status).To(Equal(http.StatusNotFound), "route %q: %v", route, a.err)
	}

	_, err = sys.kubectlApply(fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: %s
  namespace: %s
spec:
  from:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: %s}
  to:
  - {group: "", kind: Service}
`, leakGrant, tenantNS, ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		_, _ = sys.kubectl("delete", "referencegrant", leakGrant, "-n", tenantNS, "--ignore-not-found")
	})
	Eventually(func(g Gomega) {
		for what, c := range map[string]openai.Client{"the policy rule": inference, "the plain rule": plain} {
			a := chat(c, secretModel, "Now with a grant.", 4)
			g.Expect(a.err).NotTo(HaveOccurred(), what)
			g.Expect(a.endpoint).To(Equal(secretPod), what)
		}
	}).Should(Succeed())
	for i := range 5 {
		a := chat(inference, secretModel, fmt.Sprintf("Granted %d.", i), 4)
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.endpoint).To(Equal(secretPod))
	}
	Eventually(func(g Gomega) {
		g.Expect(sys.resolvedRefs(leakRoute)).To(Equal("True ResolvedRefs"))
	}).Should(Succeed())

	a := chat(none, secretModel, "A rule without backends.", 4)
	Expect(a.status).To(Equal(http.StatusInternalServerError), "%v", a.err)
	Expect(a.endpoint).To(BeEmpty())
}

// leakClient is a client of the leak route, taking the rule whose routeHdr is rule (the
// policy rule when empty): its requests are for http://leakHost:<listener port>, and it
// dials the Gateway's address, as a client that resolved leakHost to it would.
func leakClient(rule string) openai.Client {
	gw := net.JoinHostPort(gatewayAddr, sys.listenPort)
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	transport := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, gw)
	}}
	DeferCleanup(transport.CloseIdleConnections)
	return sys.client(rule,
		option.WithBaseURL("http://"+net.JoinHostPort(leakHost, sys.listenPort)+"/v1/"),
		option.WithHTTPClient(&http.Client{Transport: transport}))
}

// resolvedRefs returns "<status> <reason>" of the ResolvedRefs condition of the suite's
// HTTPRoute name, as kubectl shows it.
func (s *system) resolvedRefs(route string) (string, error) {
	return s.kubectl("get", "httproute", route, "-n", ns, "-o",
		`jsonpath={range .status.parents[*].conditions[?(@.type=="ResolvedRefs")]}{.status} {.reason}{end}`)
}
