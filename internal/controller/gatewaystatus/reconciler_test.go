package gatewaystatus_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/controller/gatewaystatus"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

func TestMain(m *testing.M) {
	// Only errors: a failing test shows what the reconciler could not do.
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	// The tests share one control plane, which RunMain stops.
	os.Exit(testenv.RunMain(m))
}

// env is one test's view of the shared control plane: a manager running the Gateway API
// status reconciler with its own address pool, and a GatewayClass of Switchboard's of
// the test's own.
type env struct {
	t     *testing.T
	c     *testenv.Cluster
	k     client.Client
	class string
}

// start runs a manager with the reconciler allocating from pool until the test ends, then
// checks that the manager left no goroutine behind (RunManager does not check that). The
// test's GatewayClass is deleted when it ends, so that later tests' reconcilers do not
// count its Gateways as Switchboard's.
func start(t *testing.T, pool string) *env {
	t.Helper()
	return startOn(t, testenv.Shared(t), pool)
}

// startOn is start on the control plane c.
func startOn(t *testing.T, c *testenv.Cluster, pool string) *env {
	t.Helper()
	p, err := gatewaystatus.ParseAddressPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	class := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "switchboard-"},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: routetable.ControllerName},
	}
	c.Create(t, class)
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), class); err != nil {
			t.Errorf("delete GatewayClass %s: %v", class.Name, err)
		}
	})
	leaks := goleak.IgnoreCurrent()
	// Cleanups run last-registered first: this one runs after the manager stopped.
	t.Cleanup(func() {
		// Idle HTTP/2 connections to the API server outlive the manager by design. The
		// metadata-only Secret informer's watch.Filter can be left blocked sending an
		// event its stopped reflector no longer reads (kubernetes/kubernetes#113254).
		goleak.VerifyNone(t, leaks, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
			goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"))
	})
	c.RunManager(t, func(mgr ctrl.Manager) error {
		return (&gatewaystatus.Reconciler{Client: mgr.GetClient(), AddressPool: p}).SetupWithManager(mgr)
	})
	return &env{t: t, c: c, k: c.Client, class: class.Name}
}

// namespace creates a namespace of the test's own, with labels.
func (e *env) namespace(labels map[string]string) string {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-status-", Labels: labels}}
	e.c.Create(e.t, ns)
	return ns.Name
}

// gateway returns a Gateway of the test's class in ns with the listeners, and the
// address when it is not empty.
func (e *env) gateway(ns, name, address string, listeners ...gatewayv1.Listener) *gatewayv1.Gateway {
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(e.class), Listeners: listeners},
	}
	if address != "" {
		gw.Spec.Addresses = []gatewayv1.GatewaySpecAddress{{Type: ptr.To(gatewayv1.IPAddressType), Value: address}}
	}
	return gw
}

// listener returns an HTTP listener on port, for hostname when it is not empty.
func listener(name string, port int, hostname string) gatewayv1.Listener {
	l := gatewayv1.Listener{Name: gatewayv1.SectionName(name), Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType}
	if hostname != "" {
		l.Hostname = ptr.To(gatewayv1.Hostname(hostname))
	}
	return l
}

// eventually polls check until it returns nil or 30s pass; on timeout it also logs the
// last error.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var err error
	// t.Fatalf in WaitUntil unwinds through this deferred call.
	defer func() {
		if err != nil {
			t.Logf("%s: %v", what, err)
		}
	}()
	testenv.WaitUntil(t, 30*time.Second, what, func() bool {
		err = check()
		return err == nil
	})
}

// hasCondition checks that conds hold typ with status and reason at generation.
func hasCondition[T, R ~string](conds []metav1.Condition, typ T, status metav1.ConditionStatus, reason R, generation int64) error {
	c := meta.FindStatusCondition(conds, string(typ))
	if c == nil {
		return fmt.Errorf("no %s condition in %+v", typ, conds)
	}
	if c.Status != status || c.Reason != string(reason) || c.ObservedGeneration != generation {
		return fmt.Errorf("%s=%s reason %s gen %d (%s), want %s reason %s gen %d",
			typ, c.Status, c.Reason, c.ObservedGeneration, c.Message, status, reason, generation)
	}
	return nil
}

// gatewayCheck is one expectation on a Gateway's status: a condition of the Gateway, or
// of its listener when listener is set.
type gatewayCheck struct {
	listener gatewayv1.SectionName
	typ      string
	status   metav1.ConditionStatus
	reason   string
}

// programmed and notProgrammed are the Gateway-level Programmed expectations.
func programmed() gatewayCheck {
	return gatewayCheck{typ: string(gatewayv1.GatewayConditionProgrammed), status: metav1.ConditionTrue, reason: string(gatewayv1.GatewayReasonProgrammed)}
}

func notProgrammed(reason gatewayv1.GatewayConditionReason) gatewayCheck {
	return gatewayCheck{typ: string(gatewayv1.GatewayConditionProgrammed), status: metav1.ConditionFalse, reason: string(reason)}
}

// waitForGateway waits until the Gateway's status meets every check and returns it.
func (e *env) waitForGateway(key client.ObjectKey, checks ...gatewayCheck) *gatewayv1.Gateway {
	e.t.Helper()
	var gw gatewayv1.Gateway
	eventually(e.t, fmt.Sprintf("Gateway %s status %+v", key, checks), func() error {
		if err := e.k.Get(context.Background(), key, &gw); err != nil {
			return err
		}
		for _, c := range checks {
			conds := gw.Status.Conditions
			if c.listener != "" {
				conds = nil
				for _, ls := range gw.Status.Listeners {
					if ls.Name == c.listener {
						conds = ls.Conditions
					}
				}
			}
			if err := hasCondition(conds, c.typ, c.status, c.reason, gw.Generation); err != nil {
				return fmt.Errorf("listener %q: %w", c.listener, err)
			}
		}
		return nil
	})
	return &gw
}

// address returns the one status address of gw, failing the test if it has not exactly
// one of type IPAddress.
func address(t *testing.T, gw *gatewayv1.Gateway) string {
	t.Helper()
	a := gw.Status.Addresses
	if len(a) != 1 || a[0].Type == nil || *a[0].Type != gatewayv1.IPAddressType {
		t.Fatalf("Gateway %s status.addresses %+v, want one IPAddress", gw.Name, a)
	}
	return a[0].Value
}

// ourParent returns the route's status.parents entry of Switchboard's controller.
func ourParent(route *gatewayv1.HTTPRoute) (*gatewayv1.RouteParentStatus, error) {
	for i, p := range route.Status.Parents {
		if p.ControllerName == routetable.ControllerName {
			return &route.Status.Parents[i], nil
		}
	}
	return nil, fmt.Errorf("no parents entry of %s in %+v", routetable.ControllerName, route.Status.Parents)
}

// routeWant is the expected status of a route's Switchboard parents entry: the reasons
// of Accepted and ResolvedRefs (each True when named like its condition), and whether
// PartiallyInvalid is True.
type routeWant struct {
	accepted, resolvedRefs gatewayv1.RouteConditionReason
	partiallyInvalid       bool
}

// waitForRoute waits until the route's Switchboard entry is as w says and returns it.
func (e *env) waitForRoute(key client.ObjectKey, w routeWant) *gatewayv1.HTTPRoute {
	e.t.Helper()
	var route gatewayv1.HTTPRoute
	eventually(e.t, fmt.Sprintf("route %s %+v", key, w), func() error {
		if err := e.k.Get(context.Background(), key, &route); err != nil {
			return err
		}
		p, err := ourParent(&route)
		if err != nil {
			return err
		}
		for typ, reason := range map[gatewayv1.RouteConditionType]gatewayv1.RouteConditionReason{
			gatewayv1.RouteConditionAccepted:     w.accepted,
			gatewayv1.RouteConditionResolvedRefs: w.resolvedRefs,
		} {
			status := metav1.ConditionFalse
			if string(reason) == string(typ) {
				status = metav1.ConditionTrue
			}
			if err := hasCondition(p.Conditions, typ, status, reason, route.Generation); err != nil {
				return err
			}
		}
		pi := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionPartiallyInvalid))
		switch {
		case w.partiallyInvalid:
			return hasCondition(p.Conditions, gatewayv1.RouteConditionPartiallyInvalid, metav1.ConditionTrue,
				gatewayv1.RouteReasonUnsupportedValue, route.Generation)
		case pi != nil:
			return fmt.Errorf("unexpected PartiallyInvalid %+v", pi)
		}
		return nil
	})
	return &route
}

// updateRoute applies change to the current route and updates it.
func (e *env) updateRoute(key client.ObjectKey, change func(*gatewayv1.HTTPRoute)) {
	e.t.Helper()
	var route gatewayv1.HTTPRoute
	if err := e.k.Get(context.Background(), key, &route); err != nil {
		e.t.Fatal(err)
	}
	change(&route)
	if err := e.k.Update(context.Background(), &route); err != nil {
		e.t.Fatal(err)
	}
}

// route returns an HTTPRoute in ns with one parentRef and the rules.
func route(ns, name string, parent gatewayv1.ParentReference, rules ...gatewayv1.HTTPRouteRule) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{parent}},
			Rules:           rules,
		},
	}
}

// rule returns a route rule with the filters and backends.
func rule(filters []gatewayv1.HTTPRouteFilter, backends ...gatewayv1.HTTPBackendRef) gatewayv1.HTTPRouteRule {
	return gatewayv1.HTTPRouteRule{Filters: filters, BackendRefs: backends}
}

// extensionRef returns an ExtensionRef filter naming an object of kind in Switchboard's
// API group.
func extensionRef(kind, name string) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{
		Type: gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{
			Group: routetable.PolicyGroup, Kind: gatewayv1.Kind(kind), Name: gatewayv1.ObjectName(name),
		},
	}
}

func policyFilter(name string) []gatewayv1.HTTPRouteFilter {
	return []gatewayv1.HTTPRouteFilter{extensionRef(routetable.PolicyKind, name)}
}

// backend returns a backendRef to port 8000 of the Service ns/name; ns "" is the route's
// namespace.
func backend(ns, name string) gatewayv1.HTTPBackendRef {
	ref := gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr.To(gatewayv1.PortNumber(8000))},
	}}
	if ns != "" {
		ref.Namespace = ptr.To(gatewayv1.Namespace(ns))
	}
	return ref
}

// service returns a Service in ns listening on port 8000.
func service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 8000}}},
	}
}

// TestGatewayAPIStatus walks a GatewayClass, a Gateway and an HTTPRoute through the
// conditions Switchboard writes, and checks that another controller's route status
// entry survives every write.
func TestGatewayAPIStatus(t *testing.T) {
	e := start(t, gatewaystatus.DefaultAddressPool)
	k := e.k
	ctx := context.Background()
	ns := e.namespace(nil)

	foreignClass := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "other-" + ns},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: "example.com/other"},
	}
	gw := e.gateway(ns, "gw", "", listener("http", 8080, ""), gatewayv1.Listener{
		Name: "tls", Port: 8443, Protocol: gatewayv1.TLSProtocolType,
		TLS: &gatewayv1.ListenerTLSConfig{Mode: ptr.To(gatewayv1.TLSModePassthrough)},
	})
	e.c.Create(t, foreignClass, gw, service(ns, "engines"))

	eventually(t, "GatewayClass accepted", func() error {
		var gc gatewayv1.GatewayClass
		if err := k.Get(ctx, client.ObjectKey{Name: e.class}, &gc); err != nil {
			return err
		}
		var published []string
		for _, f := range gc.Status.SupportedFeatures {
			published = append(published, string(f.Name))
		}
		for _, f := range gatewaystatus.SupportedFeatures {
			if !slices.Contains(published, string(f)) {
				return fmt.Errorf("status.supportedFeatures = %v lacks %s", published, f)
			}
		}
		return hasCondition(gc.Status.Conditions, gatewayv1.GatewayClassConditionStatusAccepted, metav1.ConditionTrue,
			gatewayv1.GatewayClassReasonAccepted, gc.Generation)
	})

	// The Gateway is accepted and programmed on an address of the pool; its TLS listener
	// is not supported.
	gatewayHas := func(attached int32) {
		t.Helper()
		g := e.waitForGateway(client.ObjectKeyFromObject(gw),
			gatewayCheck{typ: string(gatewayv1.GatewayConditionAccepted), status: metav1.ConditionTrue, reason: string(gatewayv1.GatewayReasonListenersNotValid)},
			programmed(),
			gatewayCheck{"http", string(gatewayv1.ListenerConditionAccepted), metav1.ConditionTrue, string(gatewayv1.ListenerReasonAccepted)},
			gatewayCheck{"http", string(gatewayv1.ListenerConditionProgrammed), metav1.ConditionTrue, string(gatewayv1.ListenerReasonProgrammed)},
			gatewayCheck{"http", string(gatewayv1.ListenerConditionResolvedRefs), metav1.ConditionTrue, string(gatewayv1.ListenerReasonResolvedRefs)},
			gatewayCheck{"http", string(gatewayv1.ListenerConditionConflicted), metav1.ConditionFalse, string(gatewayv1.ListenerReasonNoConflicts)},
			gatewayCheck{"tls", string(gatewayv1.ListenerConditionAccepted), metav1.ConditionFalse, string(gatewayv1.ListenerReasonUnsupportedProtocol)},
		)
		if ip := netip.MustParseAddr(address(t, g)); !strings.HasPrefix(ip.String(), "127.0.1.") {
			t.Fatalf("address %s is not in the pool %s", ip, gatewaystatus.DefaultAddressPool)
		}
		eventually(t, fmt.Sprintf("%d routes attached to the http listener", attached), func() error {
			if err := k.Get(ctx, client.ObjectKeyFromObject(gw), g); err != nil {
				return err
			}
			if len(g.Status.Listeners) != 2 {
				return fmt.Errorf("listeners %+v", g.Status.Listeners)
			}
			http := g.Status.Listeners[0]
			if http.Name != "http" || http.AttachedRoutes != attached || len(http.SupportedKinds) != 1 || http.SupportedKinds[0].Kind != "HTTPRoute" {
				return fmt.Errorf("http listener %+v", http)
			}
			return nil
		})
	}
	gatewayHas(0)

	// A route to the Gateway whose rule names a RoutingPolicy that does not exist.
	r := route(ns, "route", gatewayv1.ParentReference{Name: "gw"}, rule(policyFilter("policy"), backend("", "engines")))
	r.Spec.ParentRefs = append(r.Spec.ParentRefs, gatewayv1.ParentReference{Name: "elsewhere"}) // another controller's
	e.c.Create(t, &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(foreignClass.Name), Listeners: []gatewayv1.Listener{
			listener("http", 80, ""),
		}},
	}, r)
	key := client.ObjectKeyFromObject(r)

	// The other controller writes its own entry; Switchboard must keep it.
	foreign := gatewayv1.RouteParentStatus{
		ParentRef:      gatewayv1.ParentReference{Name: "elsewhere"},
		ControllerName: "example.com/other",
		Conditions: []metav1.Condition{{
			Type: string(gatewayv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: "Accepted",
			Message: "mine", LastTransitionTime: metav1.Now(), ObservedGeneration: 1,
		}},
	}
	eventually(t, "write the other controller's entry", func() error {
		var r gatewayv1.HTTPRoute
		if err := k.Get(ctx, key, &r); err != nil {
			return err
		}
		r.Status.Parents = append(r.Status.Parents, foreign)
		return k.Status().Update(ctx, &r)
	})

	got := e.waitForRoute(key, routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: routetable.RouteReasonRoutingPolicyNotFound})
	p, _ := ourParent(got)
	if c := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionResolvedRefs)); c.Message == "" {
		t.Fatal("ResolvedRefs message is empty")
	} else {
		t.Logf("missing policy: %s", c.Message)
	}
	if p.ParentRef.Name != "gw" {
		t.Fatalf("parentRef %+v", p.ParentRef)
	}
	gatewayHas(1)

	// Creating the policy resolves the reference.
	e.c.Create(t, &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy"},
		Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
	})
	e.waitForRoute(key, routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs})

	// A parentRef naming a listener the Gateway does not have.
	e.updateRoute(key, func(r *gatewayv1.HTTPRoute) {
		r.Spec.ParentRefs[0].SectionName = ptr.To(gatewayv1.SectionName("nope"))
	})
	got = e.waitForRoute(key, routeWant{accepted: gatewayv1.RouteReasonNoMatchingParent, resolvedRefs: gatewayv1.RouteReasonResolvedRefs})
	gatewayHas(0)

	// The other controller's entry survived every write, unchanged.
	if len(got.Status.Parents) != 2 {
		t.Fatalf("parents %+v", got.Status.Parents)
	}
	kept := got.Status.Parents[0]
	if kept.ControllerName != foreign.ControllerName || kept.ParentRef.Name != "elsewhere" || kept.Conditions[0].Message != "mine" {
		t.Fatalf("other controller's entry changed: %+v", kept)
	}

	// Once the route names no Switchboard Gateway, Switchboard's entry goes.
	e.updateRoute(key, func(r *gatewayv1.HTTPRoute) { r.Spec.ParentRefs = r.Spec.ParentRefs[1:] })
	eventually(t, "Switchboard's parents entry removed", func() error {
		var r gatewayv1.HTTPRoute
		if err := k.Get(ctx, key, &r); err != nil {
			return err
		}
		if len(r.Status.Parents) != 1 || r.Status.Parents[0].ControllerName != foreign.ControllerName {
			return fmt.Errorf("parents %+v", r.Status.Parents)
		}
		return nil
	})

	// A Gateway of another class gets no status from Switchboard.
	var other gatewayv1.Gateway
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elsewhere"}, &other); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(other.Status.Conditions, string(gatewayv1.GatewayConditionAccepted)); c != nil && c.Reason != string(gatewayv1.GatewayReasonPending) {
		t.Fatalf("foreign Gateway got status %+v", c)
	}
	if len(other.Status.Addresses) != 0 {
		t.Fatalf("foreign Gateway got addresses %+v", other.Status.Addresses)
	}
}

// TestGatewayAddresses checks that Gateways without spec.addresses get distinct, sticky
// addresses of the pool, that a spec address is used as is, and that a Gateway the pool
// has no address left for is not programmed until one is freed.
func TestGatewayAddresses(t *testing.T) {
	const pool = "127.0.2.1-127.0.2.2"
	e := start(t, pool)
	ctx := context.Background()
	ns := e.namespace(nil)
	http := listener("http", 8080, "")

	a, b := e.gateway(ns, "a", "", http), e.gateway(ns, "b", "", http)
	e.c.Create(t, a, b)
	addrA := address(t, e.waitForGateway(client.ObjectKeyFromObject(a), programmed()))
	addrB := address(t, e.waitForGateway(client.ObjectKeyFromObject(b), programmed()))
	if addrA == addrB {
		t.Fatalf("Gateways a and b share address %s", addrA)
	}
	for _, ip := range []string{addrA, addrB} {
		if ip != "127.0.2.1" && ip != "127.0.2.2" {
			t.Fatalf("address %s is not in the pool %s", ip, pool)
		}
	}

	// A Gateway with spec.addresses is served there, and takes nothing from the pool.
	pinned := e.gateway(ns, "pinned", "192.0.2.1", http)
	e.c.Create(t, pinned)
	if got := address(t, e.waitForGateway(client.ObjectKeyFromObject(pinned), programmed())); got != "192.0.2.1" {
		t.Fatalf("Gateway with spec address 192.0.2.1 has status address %s", got)
	}

	// The pool is exhausted: the next Gateway gets no address.
	c := e.gateway(ns, "c", "", http)
	e.c.Create(t, c)
	gotC := e.waitForGateway(client.ObjectKeyFromObject(c), notProgrammed(gatewayv1.GatewayReasonAddressNotAssigned),
		gatewayCheck{"http", string(gatewayv1.ListenerConditionProgrammed), metav1.ConditionFalse, string(gatewayv1.ListenerReasonInvalid)})
	if len(gotC.Status.Addresses) != 0 {
		t.Fatalf("Gateway c got addresses %+v from an exhausted pool", gotC.Status.Addresses)
	}
	t.Logf("exhausted: %s", meta.FindStatusCondition(gotC.Status.Conditions, string(gatewayv1.GatewayConditionProgrammed)).Message)

	// Every reconcile since kept a's and b's addresses.
	for key, want := range map[client.ObjectKey]string{client.ObjectKeyFromObject(a): addrA, client.ObjectKeyFromObject(b): addrB} {
		if got := address(t, e.waitForGateway(key, programmed())); got != want {
			t.Fatalf("Gateway %s moved from %s to %s", key, want, got)
		}
	}

	// Deleting a frees its address for c; b keeps its own.
	if err := e.k.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := address(t, e.waitForGateway(client.ObjectKeyFromObject(c), programmed())); got != addrA {
		t.Fatalf("Gateway c got %s, want a's freed address %s", got, addrA)
	}
	if got := address(t, e.waitForGateway(client.ObjectKeyFromObject(b), programmed())); got != addrB {
		t.Fatalf("Gateway b moved from %s to %s", addrB, got)
	}
}

// TestGatewayConflicts checks the conditions of Gateways and listeners that cannot all
// be served: the newer of two Gateways on one address and port, and listeners of one
// Gateway that share a port. (HostnameConflict, which the API server's validation
// makes unreachable, is covered by TestGatewayStatusListeners.)
func TestGatewayConflicts(t *testing.T) {
	e := start(t, gatewaystatus.DefaultAddressPool)
	listenerCheck := func(l gatewayv1.SectionName, typ gatewayv1.ListenerConditionType, ok bool, reason gatewayv1.ListenerConditionReason) gatewayCheck {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		return gatewayCheck{l, string(typ), status, string(reason)}
	}
	for _, tc := range []struct {
		name string
		// gateways are created in order, so each is newer than those before it (names
		// sort in the same order, for Gateways created within the same second).
		gateways func(ns string) []*gatewayv1.Gateway
		want     map[string][]gatewayCheck // Gateway name -> checks
	}{{
		name: "same address and port",
		gateways: func(ns string) []*gatewayv1.Gateway {
			return []*gatewayv1.Gateway{
				e.gateway(ns, "first", "192.0.2.10", listener("http", 8080, "")),
				e.gateway(ns, "second", "192.0.2.10", listener("http", 8080, "")),
			}
		},
		want: map[string][]gatewayCheck{
			"first":  {programmed()},
			"second": {notProgrammed(gatewayv1.GatewayReasonAddressNotUsable)},
		},
	}, {
		name: "same address, other ports",
		gateways: func(ns string) []*gatewayv1.Gateway {
			return []*gatewayv1.Gateway{
				e.gateway(ns, "first", "192.0.2.11", listener("http", 8080, "")),
				e.gateway(ns, "second", "192.0.2.11", listener("http", 8081, "")),
			}
		},
		want: map[string][]gatewayCheck{"first": {programmed()}, "second": {programmed()}},
	}, {
		// The API server rejects listeners of one protocol with the same port and
		// hostname, so a Gateway can only have listeners that conflict on protocol.
		name: "listeners with the same port and other protocols",
		gateways: func(ns string) []*gatewayv1.Gateway {
			return []*gatewayv1.Gateway{e.gateway(ns, "gw", "192.0.2.12",
				gatewayv1.Listener{Name: "tcp", Port: 8080, Protocol: gatewayv1.TCPProtocolType},
				listener("http", 8080, ""),
				listener("other", 8081, ""),
			)}
		},
		want: map[string][]gatewayCheck{"gw": {
			{typ: string(gatewayv1.GatewayConditionAccepted), status: metav1.ConditionTrue, reason: string(gatewayv1.GatewayReasonListenersNotValid)},
			programmed(),
			listenerCheck("http", gatewayv1.ListenerConditionConflicted, true, gatewayv1.ListenerReasonProtocolConflict),
			listenerCheck("http", gatewayv1.ListenerConditionAccepted, false, gatewayv1.ListenerReasonProtocolConflict),
			listenerCheck("http", gatewayv1.ListenerConditionProgrammed, false, gatewayv1.ListenerReasonInvalid),
			listenerCheck("other", gatewayv1.ListenerConditionConflicted, false, gatewayv1.ListenerReasonNoConflicts),
			listenerCheck("other", gatewayv1.ListenerConditionAccepted, true, gatewayv1.ListenerReasonAccepted),
			listenerCheck("other", gatewayv1.ListenerConditionProgrammed, true, gatewayv1.ListenerReasonProgrammed),
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := e.namespace(nil)
			for _, gw := range tc.gateways(ns) {
				e.c.Create(t, gw)
			}
			for name, checks := range tc.want {
				gw := e.waitForGateway(client.ObjectKey{Namespace: ns, Name: name}, checks...)
				if c := meta.FindStatusCondition(gw.Status.Conditions, string(gatewayv1.GatewayConditionProgrammed)); c.Status != metav1.ConditionTrue {
					t.Logf("%s: %s", name, c.Message)
				}
			}
		})
	}
}

// TestRouteConditions checks the Accepted, ResolvedRefs and PartiallyInvalid conditions
// of routes whose references the gateway cannot all resolve, and that each clears once
// its cause goes away.
func TestRouteConditions(t *testing.T) {
	e := start(t, gatewaystatus.DefaultAddressPool)
	ctx := context.Background()
	const selected = "switchboard.dev/test-routes"
	ns := e.namespace(nil)
	gw := e.gateway(ns, "gw", "",
		listener("same", 8080, ""),
		listener("selected", 8081, ""),
	)
	gw.Spec.Listeners[1].AllowedRoutes = &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{
		From:     ptr.To(gatewayv1.NamespacesFromSelector),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{selected: "yes"}},
	}}
	e.c.Create(t, gw, service(ns, "engines"))
	same := gatewayv1.ParentReference{Name: "gw"}
	// elsewhere is a namespace of routes that only the selected listener can admit, and
	// of Services the routes in ns may reference only with a ReferenceGrant.
	elsewhere := e.namespace(nil)
	e.c.Create(t, service(elsewhere, "engines"))

	for _, tc := range []struct {
		name string
		// objects are created before the route.
		objects []client.Object
		route   *gatewayv1.HTTPRoute
		want    routeWant
		// fix, when set, removes the cause; the route then has fixed.
		fix   func(t *testing.T)
		fixed routeWant
	}{{
		name:  "missing RoutingPolicy",
		route: route(ns, "missing-policy", same, rule(policyFilter("absent"), backend("", "engines"))),
		want:  routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: routetable.RouteReasonRoutingPolicyNotFound},
		fix: func(t *testing.T) {
			e.c.Create(t, &v1alpha1.RoutingPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "absent"},
				Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
			})
		},
		fixed: routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs},
	}, {
		// Scorer weights of 0 pass admission but leave the weighted strategy nothing to
		// weigh: the gateway cannot build a router from the policy.
		name:  "invalid RoutingPolicy",
		route: route(ns, "invalid-policy", same, rule(policyFilter("zero-weights"), backend("", "engines"))),
		objects: []client.Object{&v1alpha1.RoutingPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "zero-weights"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted, Scorers: []v1alpha1.Scorer{
				{Name: v1alpha1.StrategyLeastRequest, Weight: ptr.To[int32](0)},
				{Name: v1alpha1.StrategyPrefixCache, Weight: ptr.To[int32](0)},
			}},
		}},
		want: routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: routetable.RouteReasonInvalidRoutingPolicy},
	}, {
		name: "foreign ExtensionRef kind beside a valid rule",
		route: route(ns, "foreign-kind", same,
			rule([]gatewayv1.HTTPRouteFilter{extensionRef("Unknown", "x")}, backend("", "engines")),
			rule(nil, backend("", "engines")),
		),
		want: routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonInvalidKind, partiallyInvalid: true},
	}, {
		name:  "foreign ExtensionRef kind in the only rule",
		route: route(ns, "foreign-kind-only", same, rule([]gatewayv1.HTTPRouteFilter{extensionRef("Unknown", "x")}, backend("", "engines"))),
		want:  routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonInvalidKind},
	}, {
		name:  "cross-namespace backend",
		route: route(ns, "cross-namespace", same, rule(nil, backend(elsewhere, "engines"))),
		want:  routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonRefNotPermitted},
		fix: func(t *testing.T) {
			e.c.Create(t, &gatewayv1.ReferenceGrant{
				ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: "routes-of-" + ns},
				Spec: gatewayv1.ReferenceGrantSpec{
					From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Namespace: gatewayv1.Namespace(ns)}},
					To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
				},
			})
		},
		fixed: routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs},
	}, {
		name:  "missing Service",
		route: route(ns, "missing-service", same, rule(nil, backend("", "engines"), backend("", "later"))),
		want:  routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonBackendNotFound},
		fix:   func(t *testing.T) { e.c.Create(t, service(ns, "later")) },
		fixed: routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs},
	}, {
		name: "namespace not selected by the listener",
		route: route(elsewhere, "unselected", gatewayv1.ParentReference{
			Namespace: ptr.To(gatewayv1.Namespace(ns)), Name: "gw", SectionName: ptr.To(gatewayv1.SectionName("selected")),
		}, rule(nil, backend("", "engines"))),
		want: routeWant{accepted: gatewayv1.RouteReasonNotAllowedByListeners, resolvedRefs: gatewayv1.RouteReasonResolvedRefs},
		fix: func(t *testing.T) {
			var n corev1.Namespace
			if err := e.k.Get(ctx, client.ObjectKey{Name: elsewhere}, &n); err != nil {
				t.Fatal(err)
			}
			n.Labels = map[string]string{selected: "yes"}
			if err := e.k.Update(ctx, &n); err != nil {
				t.Fatal(err)
			}
		},
		fixed: routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e.c.Create(t, append(tc.objects, tc.route)...)
			key := client.ObjectKeyFromObject(tc.route)
			got := e.waitForRoute(key, tc.want)
			p, _ := ourParent(got)
			for _, c := range p.Conditions {
				t.Logf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
			if tc.fix != nil {
				tc.fix(t)
				e.waitForRoute(key, tc.fixed)
			}
		})
	}
}
