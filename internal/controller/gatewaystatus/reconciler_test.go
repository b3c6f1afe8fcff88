package gatewaystatus_test

import (
	"context"
	"fmt"
	"os"
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
	"github.com/switchboard-llm/switchboard/internal/gateway/routetable"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

func TestMain(m *testing.M) {
	// Only errors: a failing test shows what the reconciler could not do.
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	os.Exit(m.Run())
}

// startManager starts a control plane and runs a manager with the Gateway API status
// reconciler on it until the test ends, then checks that the manager left no goroutine
// behind (testenv's RunManager does not check that).
func startManager(t *testing.T) *testenv.Cluster {
	t.Helper()
	c := testenv.Start(t)
	leaks := goleak.IgnoreCurrent()
	// Cleanups run last-registered first: this one runs after the manager stopped.
	t.Cleanup(func() {
		// Idle HTTP/2 connections to the API server outlive the manager by design.
		goleak.VerifyNone(t, leaks, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
	})
	c.RunManager(t, func(mgr ctrl.Manager) error {
		return (&gatewaystatus.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	return c
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
func hasCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, generation int64) error {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return fmt.Errorf("no %s condition in %+v", typ, conds)
	}
	if c.Status != status || c.Reason != reason || c.ObservedGeneration != generation {
		return fmt.Errorf("%s=%s reason %s gen %d (%s), want %s reason %s gen %d",
			typ, c.Status, c.Reason, c.ObservedGeneration, c.Message, status, reason, generation)
	}
	return nil
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

// routeCondition waits for the route's Switchboard entry to have the condition.
func routeCondition(t *testing.T, k client.Client, key client.ObjectKey, typ gatewayv1.RouteConditionType,
	status metav1.ConditionStatus, reason gatewayv1.RouteConditionReason) *gatewayv1.HTTPRoute {
	t.Helper()
	var route gatewayv1.HTTPRoute
	eventually(t, fmt.Sprintf("route %s %s=%s %s", key, typ, status, reason), func() error {
		if err := k.Get(context.Background(), key, &route); err != nil {
			return err
		}
		p, err := ourParent(&route)
		if err != nil {
			return err
		}
		return hasCondition(p.Conditions, string(typ), status, string(reason), route.Generation)
	})
	return &route
}

// updateRoute applies change to the current route and updates it.
func updateRoute(t *testing.T, k client.Client, key client.ObjectKey, change func(*gatewayv1.HTTPRoute)) {
	t.Helper()
	var route gatewayv1.HTTPRoute
	if err := k.Get(context.Background(), key, &route); err != nil {
		t.Fatal(err)
	}
	change(&route)
	if err := k.Update(context.Background(), &route); err != nil {
		t.Fatal(err)
	}
}

func policyFilter(kind, name string) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{
		Type: gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{
			Group: routetable.PolicyGroup, Kind: gatewayv1.Kind(kind), Name: gatewayv1.ObjectName(name),
		},
	}
}

func backend(name string) gatewayv1.HTTPBackendRef {
	return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr.To(gatewayv1.PortNumber(8000))},
	}}
}

// TestGatewayAPIStatus walks a GatewayClass, a Gateway and an HTTPRoute through the
// conditions Switchboard writes, and checks that another controller's route status
// entry survives every write.
func TestGatewayAPIStatus(t *testing.T) {
	c := startManager(t)
	k := c.Client
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-status-"}}
	c.Create(t, nsObj)
	ns := nsObj.Name

	class := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "switchboard-" + ns},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: routetable.ControllerName},
	}
	foreignClass := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "other-" + ns},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: "example.com/other"},
	}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{
			GatewayClassName: gatewayv1.ObjectName(class.Name),
			Listeners: []gatewayv1.Listener{
				{Name: "http", Port: 8080, Protocol: gatewayv1.HTTPProtocolType},
				{Name: "tls", Port: 8443, Protocol: gatewayv1.TLSProtocolType, TLS: &gatewayv1.ListenerTLSConfig{
					Mode: ptr.To(gatewayv1.TLSModePassthrough),
				}},
			},
		},
	}
	c.Create(t, class, foreignClass, gw, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "engines"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "engines"}, Ports: []corev1.ServicePort{{Port: 8000}}},
	})

	eventually(t, "GatewayClass accepted", func() error {
		var gc gatewayv1.GatewayClass
		if err := k.Get(ctx, client.ObjectKeyFromObject(class), &gc); err != nil {
			return err
		}
		return hasCondition(gc.Status.Conditions, string(gatewayv1.GatewayClassConditionStatusAccepted), metav1.ConditionTrue,
			string(gatewayv1.GatewayClassReasonAccepted), gc.Generation)
	})

	// The Gateway is accepted and programmed; its TLS listener is not supported.
	gatewayHas := func(attached int32) {
		t.Helper()
		eventually(t, fmt.Sprintf("Gateway programmed with %d attached routes", attached), func() error {
			var g gatewayv1.Gateway
			if err := k.Get(ctx, client.ObjectKeyFromObject(gw), &g); err != nil {
				return err
			}
			gen := g.Generation
			if err := hasCondition(g.Status.Conditions, string(gatewayv1.GatewayConditionAccepted), metav1.ConditionTrue,
				string(gatewayv1.GatewayReasonListenersNotValid), gen); err != nil {
				return err
			}
			if err := hasCondition(g.Status.Conditions, string(gatewayv1.GatewayConditionProgrammed), metav1.ConditionTrue,
				string(gatewayv1.GatewayReasonProgrammed), gen); err != nil {
				return err
			}
			if len(g.Status.Listeners) != 2 {
				return fmt.Errorf("listeners %+v", g.Status.Listeners)
			}
			http, tls := g.Status.Listeners[0], g.Status.Listeners[1]
			if http.Name != "http" || http.AttachedRoutes != attached || len(http.SupportedKinds) != 1 || http.SupportedKinds[0].Kind != "HTTPRoute" {
				return fmt.Errorf("http listener %+v", http)
			}
			for typ, reason := range map[gatewayv1.ListenerConditionType]gatewayv1.ListenerConditionReason{
				gatewayv1.ListenerConditionAccepted:     gatewayv1.ListenerReasonAccepted,
				gatewayv1.ListenerConditionProgrammed:   gatewayv1.ListenerReasonProgrammed,
				gatewayv1.ListenerConditionResolvedRefs: gatewayv1.ListenerReasonResolvedRefs,
			} {
				if err := hasCondition(http.Conditions, string(typ), metav1.ConditionTrue, string(reason), gen); err != nil {
					return fmt.Errorf("http listener: %w", err)
				}
			}
			if err := hasCondition(tls.Conditions, string(gatewayv1.ListenerConditionAccepted), metav1.ConditionFalse,
				string(gatewayv1.ListenerReasonUnsupportedProtocol), gen); err != nil {
				return fmt.Errorf("tls listener: %w", err)
			}
			return nil
		})
	}
	gatewayHas(0)

	// A route to the Gateway whose rule names a RoutingPolicy that does not exist.
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "route"},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{
				{Name: "gw"},
				{Name: "elsewhere"}, // a Gateway of another controller
			}},
			Rules: []gatewayv1.HTTPRouteRule{{
				Filters:     []gatewayv1.HTTPRouteFilter{policyFilter(routetable.PolicyKind, "policy")},
				BackendRefs: []gatewayv1.HTTPBackendRef{backend("engines")},
			}},
		},
	}
	c.Create(t, &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(foreignClass.Name), Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
		}},
	}, route)
	key := client.ObjectKeyFromObject(route)

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

	got := routeCondition(t, k, key, gatewayv1.RouteConditionResolvedRefs, metav1.ConditionFalse, gatewaystatus.RouteReasonRoutingPolicyNotFound)
	p, _ := ourParent(got)
	if err := hasCondition(p.Conditions, string(gatewayv1.RouteConditionAccepted), metav1.ConditionTrue,
		string(gatewayv1.RouteReasonAccepted), got.Generation); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionResolvedRefs)); c.Message == "" {
		t.Fatal("ResolvedRefs message is empty")
	} else {
		t.Logf("missing policy: %s", c.Message)
	}
	if len(p.ParentRef.Name) == 0 || p.ParentRef.Name != "gw" {
		t.Fatalf("parentRef %+v", p.ParentRef)
	}
	gatewayHas(1)

	// Creating the policy resolves the reference.
	c.Create(t, &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy"},
		Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
	})
	routeCondition(t, k, key, gatewayv1.RouteConditionResolvedRefs, metav1.ConditionTrue, gatewayv1.RouteReasonResolvedRefs)

	// A backend Service that does not exist.
	updateRoute(t, k, key, func(r *gatewayv1.HTTPRoute) {
		r.Spec.Rules[0].BackendRefs = []gatewayv1.HTTPBackendRef{backend("engines"), backend("missing")}
	})
	routeCondition(t, k, key, gatewayv1.RouteConditionResolvedRefs, metav1.ConditionFalse, gatewayv1.RouteReasonBackendNotFound)
	c.Create(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "missing"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 8000}}},
	})
	routeCondition(t, k, key, gatewayv1.RouteConditionResolvedRefs, metav1.ConditionTrue, gatewayv1.RouteReasonResolvedRefs)

	// An ExtensionRef to a kind Switchboard does not know.
	updateRoute(t, k, key, func(r *gatewayv1.HTTPRoute) {
		r.Spec.Rules[0].Filters = []gatewayv1.HTTPRouteFilter{policyFilter("Unknown", "policy")}
	})
	routeCondition(t, k, key, gatewayv1.RouteConditionResolvedRefs, metav1.ConditionFalse, gatewayv1.RouteReasonInvalidKind)

	// A parentRef naming a listener the Gateway does not have.
	updateRoute(t, k, key, func(r *gatewayv1.HTTPRoute) {
		r.Spec.Rules[0].Filters = []gatewayv1.HTTPRouteFilter{policyFilter(routetable.PolicyKind, "policy")}
		r.Spec.ParentRefs[0].SectionName = ptr.To(gatewayv1.SectionName("nope"))
	})
	routeCondition(t, k, key, gatewayv1.RouteConditionAccepted, metav1.ConditionFalse, gatewayv1.RouteReasonNoMatchingParent)
	got = routeCondition(t, k, key, gatewayv1.RouteConditionResolvedRefs, metav1.ConditionTrue, gatewayv1.RouteReasonResolvedRefs)
	gatewayHas(0)

	// The other controller's entry survived every write, unchanged.
	if len(got.Status.Parents) != 2 {
		t.Fatalf("parents %+v", got.Status.Parents)
	}
	kept := got.Status.Parents[0]
	if kept.ControllerName != foreign.ControllerName || kept.ParentRef.Name != "elsewhere" || kept.Conditions[0].Message != "mine" {
		t.Fatalf("other controller's entry changed: %+v", kept)
	}

	// A Gateway of another class gets no status from Switchboard.
	var other gatewayv1.Gateway
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elsewhere"}, &other); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(other.Status.Conditions, string(gatewayv1.GatewayConditionAccepted)); c != nil && c.Reason != string(gatewayv1.GatewayReasonPending) {
		t.Fatalf("foreign Gateway got status %+v", c)
	}
}
