package gateway_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// waitTimeout bounds every wait of the gateway's tests.
const waitTimeout = 15 * time.Second

// gatewayObjects returns a GatewayClass of Switchboard's controller and a Gateway "gw"
// in ns asking for the address of addr (host:port), with one HTTP listener on its port.
func gatewayObjects(t testing.TB, ns, addr string) (*gatewayv1.GatewayClass, *gatewayv1.Gateway) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	class := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "switchboard-" + ns},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: routetable.ControllerName},
	}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{
			GatewayClassName: gatewayv1.ObjectName(class.Name),
			Addresses:        []gatewayv1.GatewaySpecAddress{{Value: host}},
			Listeners: []gatewayv1.Listener{{
				Name: "http", Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType,
			}},
		},
	}
	return class, gw
}

// runGateway runs a manager on c with the gateway's cache context and the gateway's
// listeners, each Gateway on its own address, until the test ends, and waits until the
// cache is synced.
func runGateway(t testing.TB, c *testenv.Cluster, opts gateway.Options) (*gateway.Gateway, *cache.Gateway) {
	t.Helper()
	var (
		g    *gateway.Gateway
		view *cache.Gateway
	)
	c.RunManager(t, func(mgr ctrl.Manager) error {
		var err error
		if view, err = cache.InitForGateway(mgr, cache.Options{Scrape: cache.ScrapeOptions{Interval: 50 * time.Millisecond}}); err != nil {
			return err
		}
		g = gateway.New(view, opts)
		return mgr.Add(g.Listeners(gateway.ListenerOptions{SyncInterval: 50 * time.Millisecond}))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := view.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return g, view
}

// policyGateway creates in ns, on cluster c, a Gateway with a route "llama" whose rule
// sends everything to Service "llama" (the given engine pods, model llama-3-8b) under a
// RoutingPolicy "rp" with spec, runs the gateway with its metrics in a registry of their
// own, and returns it, its cache view, the listener's base URL and the registry.
func policyGateway(t *testing.T, c *testenv.Cluster, ns string, spec v1alpha1.RoutingPolicySpec, engines []string) (*gateway.Gateway, *cache.Gateway, string, *prometheus.Registry) {
	t.Helper()
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	app := map[string]string{"app": "llama"}
	for i, addr := range engines {
		c.EnginePod(t, ns, fmt.Sprintf("llama-%d", i), "llama-3-8b", addr, app)
	}
	listener := testenv.FreeAddr(t, "127.0.0.1")
	class, gw := gatewayObjects(t, ns, listener)
	policy := &v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rp"}, Spec: spec}
	route := httpRoute("llama", nil, "rp")
	route.Namespace = ns
	c.Create(t, class, gw, testenv.EngineService(ns, "llama", app), policy, route)
	g, view := runGateway(t, c, gateway.Options{})
	registry := prometheus.NewRegistry()
	if err := g.Register(registry); err != nil {
		t.Fatal(err)
	}
	return g, view, "http://" + listener, registry
}

// metricValue returns the sum over the series of the counter or gauge name in registry.
func metricValue(t *testing.T, registry *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
