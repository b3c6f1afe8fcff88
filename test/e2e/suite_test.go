package e2e

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// Names of the system under test.
const (
	ns        = "e2e"
	model     = "llama-3-8b"
	service   = "llama"
	routeHdr  = "x-e2e-route"            // selects one of the header-matched routes
	endpoint  = "x-switchboard-endpoint" // the gateway's answer: namespace/pod
	timeScale = "0.05"                   // engine-sim delays, 20x faster than real
	// scrapeInterval is how often the gateway (its default) and the metadata service
	// scrape engine metrics.
	scrapeInterval = 100 * time.Millisecond
	// gatewayAddr is the address the suite's Gateway asks for in spec.addresses.
	gatewayAddr = "127.0.0.1"
)

// engineHosts are the loopback addresses of the three engine pods llama-0..2.
var engineHosts = []string{"127.0.0.21", "127.0.0.22", "127.0.0.23"}

// policies are the RoutingPolicies the suite starts with, by name; each has a route of the
// same name, selected by header routeHdr. Policy "live" is patched by a spec.
var policies = map[string]v1alpha1.RoutingPolicySpec{
	"rr":   {Strategy: v1alpha1.StrategyRoundRobin},
	"sa":   {Strategy: v1alpha1.StrategySessionAffinity},
	"lr":   {Strategy: v1alpha1.StrategyLeastRequest},
	"live": {Strategy: v1alpha1.StrategyRoundRobin},
	"pc": {Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{
		BlockSize: new(int32(16)), LoadImbalanceThreshold: new(int32(2)),
	}},
	"random":         {Strategy: v1alpha1.StrategyRandom},
	"least-kv-cache": {Strategy: v1alpha1.StrategyLeastKVCache},
	"least-latency":  {Strategy: v1alpha1.StrategyLeastLatency},
	"throughput":     {Strategy: v1alpha1.StrategyThroughput},
	"weighted": {Strategy: v1alpha1.StrategyWeighted, Scorers: []v1alpha1.Scorer{
		{Name: v1alpha1.StrategyLeastKVCache}, {Name: v1alpha1.StrategyPrefixCache, Weight: new(int32(2))},
	}},
}

// system is the running system, shared by every spec of the suite.
type system struct {
	cluster    *testenv.Cluster
	kubeconfig string
	bin        string // directory of the built binaries
	// suite starts processes from a spec that must outlive it (a restarted gateway).
	suite testing.TB

	// listenPort is the port of the Gateway's HTTP listener, served on the Gateway's
	// address gatewayAddr by the primary gateway and on the second replica's --listen-host.
	listenPort string
	// gateway is the primary gateway process, serving the Gateway on gatewayAddr, started
	// with gatewayArgs.
	gateway        *testenv.Process
	gatewayArgs    []string
	gatewayMetrics string
	gatewayProbes  string
	// manager is the manager replica the suite started; a failover spec replaces it with
	// the replica that took over.
	manager  *managerReplica
	metadata string   // the metadata service's API address
	engines  []string // addresses of llama-0..2
}

var sys *system

// TestE2E starts the system once with the Go test's t, so that every process it starts
// ends with the test, then runs the specs in their order of definition.
func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	start := time.Now()
	sys = startSystem(t)
	t.Logf("system up in %v", time.Since(start).Round(time.Millisecond))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.Timeout = 5*time.Minute + soakDuration()
	reporterConfig.NoColor = true // the processes' logs share the output
	RunSpecs(t, "Switchboard end-to-end", suiteConfig, reporterConfig)
}

// startSystem builds the binaries, starts a control plane, three engines registered as
// Ready pods behind a Service, the Gateway API objects and policies, then the manager,
// the gateway and the metadata service, and waits until every route serves.
func startSystem(t *testing.T) *system {
	s := &system{suite: suiteTB{t}, bin: buildBinaries(t)}
	s.cluster = testenv.Start(t)
	s.kubeconfig = s.cluster.Kubeconfig(t, "e2e")
	c := s.cluster

	for i, host := range engineHosts {
		s.engines = append(s.engines, s.startEngine(t, host, model, "--seed", strconv.Itoa(i+1)))
	}
	s.listenPort = listenerPort(t)
	port, _ := strconv.Atoi(s.listenPort)

	app := map[string]string{"app": service}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "switchboard-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		testenv.EngineService(ns, service, app),
		&gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "switchboard"},
			Spec:       gatewayv1.GatewayClassSpec{ControllerName: "switchboard.dev/gateway-controller"},
		},
		&gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "switchboard",
				Addresses: []gatewayv1.GatewaySpecAddress{{Type: new(gatewayv1.IPAddressType), Value: gatewayAddr}},
				Listeners: []gatewayv1.Listener{{
					Name: "http", Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType,
				}}},
		},
		// Requests without routeHdr take the default route, whose rule has no policy: plain
		// Gateway API routing to the Service's ready pods, body not parsed.
		httpRoute("default", "", ""),
		// A rule whose policy does not exist.
		httpRoute("broken", "broken", "missing"),
	}
	for name, spec := range policies {
		objs = append(objs,
			&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec},
			httpRoute(name, name, name))
	}
	c.Create(t, objs...)
	for i, addr := range s.engines {
		c.EnginePod(t, ns, fmt.Sprintf("llama-%d", i), model, addr, app)
	}

	loopback := func() string { return testenv.FreeAddr(t, "127.0.0.1") }
	s.gatewayMetrics, s.gatewayProbes = loopback(), loopback()
	s.manager = s.startManager(t)
	managerProbes := s.manager.probes

	s.gatewayArgs = []string{"--kubeconfig", s.kubeconfig,
		"--ext-proc-bind-address", loopback(), "--ext-proc-namespace", ns,
		"--metrics-bind-address", s.gatewayMetrics, "--health-probe-bind-address", s.gatewayProbes,
		"--drain-timeout", "5s"}
	s.gateway = testenv.Run(t, s.binary("gateway"), s.gatewayArgs...)

	s.metadata = loopback()
	metadataProbes := loopback()
	testenv.Run(t, s.binary("metadata-service"), "--kubeconfig", s.kubeconfig,
		"--bind-address", s.metadata, "--metrics-bind-address", "0",
		"--health-probe-bind-address", metadataProbes, "--metrics-scrape-interval", scrapeInterval.String())

	for name, probes := range map[string]string{"manager": managerProbes, "gateway": s.gatewayProbes, "metadata-service": metadataProbes} {
		testenv.WaitUntil(t, time.Minute, name+" is ready", func() bool { return httpOK("http://" + probes + "/readyz") })
	}
	testenv.WaitUntil(t, time.Minute, "the metadata service lists 3 routable endpoints", func() bool {
		return len(s.routable(model)) == 3
	})
	for _, route := range []string{"", "rr", "sa", "lr", "live", "pc"} {
		testenv.WaitUntil(t, time.Minute, "route "+route+" serves "+model, func() bool {
			_, err := ask(s.client(route), model, "ping", 2)
			return err == nil
		})
	}
	return s
}

// startEngine runs an engine-sim process serving model on a free port of host until the
// test ends, waits until it is healthy and returns its address.
func (s *system) startEngine(t testing.TB, host, model string, flags ...string) string {
	addr := testenv.FreeAddr(t, host)
	s.runEngine(t, addr, model, flags...)
	return addr
}

// runEngine runs an engine-sim process serving model on addr until the test ends, waits
// until it is healthy and returns it.
func (s *system) runEngine(t testing.TB, addr, model string, flags ...string) *testenv.Process {
	args := append([]string{"--listen", addr, "--model", model, "--time-scale", timeScale, "--lora-load-time", "10ms"}, flags...)
	p := testenv.Run(t, s.binary("engine-sim"), args...)
	testenv.WaitUntil(t, 30*time.Second, "engine-sim on "+addr+" is healthy", func() bool { return httpOK("http://" + addr + "/health") })
	return p
}

// binary returns the path of the built command name.
func (s *system) binary(name string) string { return filepath.Join(s.bin, name) }

// buildBinaries builds the four commands into a temporary directory.
func buildBinaries(t *testing.T) string {
	return testenv.BuildCommands(t, "./cmd/manager", "./cmd/gateway", "./cmd/metadata-service", "./cmd/engine-sim")
}

// listenerPort returns a port free on both 127.0.0.1 and 127.0.0.2, where the two
// gateway replicas bind the Gateway's listener.
func listenerPort(t *testing.T) string {
	for range 20 {
		_, port, _ := net.SplitHostPort(testenv.FreeAddr(t, "127.0.0.1"))
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port)); err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no port is free on both 127.0.0.1 and 127.0.0.2")
	return ""
}

// httpRoute returns the HTTPRoute name on Gateway gw with one rule to the Service. A
// non-empty header makes the rule match only requests with routeHdr set to it; a
// non-empty policy adds an ExtensionRef filter naming that RoutingPolicy.
func httpRoute(name, header, policy string) *gatewayv1.HTTPRoute {
	rule := gatewayv1.HTTPRouteRule{
		BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: service, Port: new(gatewayv1.PortNumber(8000))},
		}}},
	}
	if header != "" {
		rule.Matches = []gatewayv1.HTTPRouteMatch{{
			Headers: []gatewayv1.HTTPHeaderMatch{{Name: routeHdr, Value: header}},
		}}
	}
	if policy != "" {
		rule.Filters = []gatewayv1.HTTPRouteFilter{{
			Type: gatewayv1.HTTPRouteFilterExtensionRef,
			ExtensionRef: &gatewayv1.LocalObjectReference{
				Group: gatewayv1.Group(v1alpha1.GroupVersion.Group), Kind: "RoutingPolicy", Name: gatewayv1.ObjectName(policy),
			},
		}}
	}
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules:           []gatewayv1.HTTPRouteRule{rule},
		},
	}
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// suiteTB is the testing.TB of the Go test that runs the suite, for processes that must
// outlive the spec that starts them (they end with the test), except that a failure fails
// the current spec instead of stopping the test's goroutine from a spec's.
type suiteTB struct{ *testing.T }

func (suiteTB) Helper()                           {}
func (suiteTB) Fatal(args ...any)                 { Fail(fmt.Sprint(args...), 1) }
func (suiteTB) Fatalf(format string, args ...any) { Fail(fmt.Sprintf(format, args...), 1) }
func (suiteTB) FailNow()                          { Fail("FailNow", 1) }

var _ testing.TB = suiteTB{}
