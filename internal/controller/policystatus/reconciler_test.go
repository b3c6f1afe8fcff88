package policystatus_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
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
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/controller/policystatus"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

func TestMain(m *testing.M) {
	// Only errors: a failing test shows what the reconciler could not do.
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	os.Exit(m.Run())
}

// startManager starts a control plane and runs a manager with the manager cache context
// and the RoutingPolicy status reconciler on it until the test ends, then checks that the
// manager left no goroutine behind (testenv's RunManager does not check that).
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
		view, err := cache.InitForManager(mgr)
		if err != nil {
			return err
		}
		return (&policystatus.Reconciler{Client: mgr.GetClient(), Pods: view}).SetupWithManager(mgr)
	})
	return c
}

// want describes the expected status of a policy; empty reasons are not checked.
type want struct {
	accepted, resolvedRefs, ready string // reasons
	routes, endpoints             int32
}

// waitForStatus polls the policy until its status matches w or 30s pass; on timeout it
// also logs the status last seen.
func waitForStatus(t *testing.T, k client.Client, key client.ObjectKey, w want) *v1alpha1.RoutingPolicy {
	t.Helper()
	var rp v1alpha1.RoutingPolicy
	var last string
	// t.Fatalf in WaitUntil unwinds through this deferred call.
	done := false
	defer func() {
		if !done {
			t.Logf("policy %s: want %+v, have %s", key, w, last)
		}
	}()
	testenv.WaitUntil(t, 30*time.Second, fmt.Sprintf("policy %s matches %+v", key, w), func() bool {
		if err := k.Get(context.Background(), key, &rp); err != nil {
			t.Fatal(err)
		}
		last = describe(&rp)
		return matches(&rp, w)
	})
	done = true
	return &rp
}

func matches(rp *v1alpha1.RoutingPolicy, w want) bool {
	if rp.Status.ObservedGeneration != rp.Generation ||
		rp.Status.AttachedRoutes != w.routes || rp.Status.ReadyEndpoints != w.endpoints {
		return false
	}
	for typ, reason := range map[string]string{
		v1alpha1.RoutingPolicyConditionAccepted:     w.accepted,
		v1alpha1.RoutingPolicyConditionResolvedRefs: w.resolvedRefs,
		v1alpha1.RoutingPolicyConditionReady:        w.ready,
	} {
		c := meta.FindStatusCondition(rp.Status.Conditions, typ)
		if c == nil || c.ObservedGeneration != rp.Generation || (reason != "" && c.Reason != reason) {
			return false
		}
		// Reasons named like the condition are the True ones.
		if reason != "" && (c.Status == metav1.ConditionTrue) != (reason == typ) {
			return false
		}
	}
	return true
}

func describe(rp *v1alpha1.RoutingPolicy) string {
	s := fmt.Sprintf("gen %d observed %d routes %d endpoints %d", rp.Generation, rp.Status.ObservedGeneration,
		rp.Status.AttachedRoutes, rp.Status.ReadyEndpoints)
	for _, c := range rp.Status.Conditions {
		s += fmt.Sprintf(" | %s=%s %s (%s) gen %d", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return s
}

// routeTo returns an HTTPRoute in ns attached to Gateway gw whose one rule applies
// policy and sends to the Services.
func routeTo(ns, name, gw, policy string, services ...string) *gatewayv1.HTTPRoute {
	rule := gatewayv1.HTTPRouteRule{
		Filters: []gatewayv1.HTTPRouteFilter{{
			Type: gatewayv1.HTTPRouteFilterExtensionRef,
			ExtensionRef: &gatewayv1.LocalObjectReference{
				Group: routetable.PolicyGroup, Kind: routetable.PolicyKind, Name: gatewayv1.ObjectName(policy),
			},
		}},
	}
	for _, svc := range services {
		rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: ptr.To(gatewayv1.PortNumber(8000))},
		}})
	}
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: gatewayv1.ObjectName(gw)}}},
			Rules:           []gatewayv1.HTTPRouteRule{rule},
		},
	}
}

// gatewayIn returns Switchboard's GatewayClass for ns and Gateway "gw" in ns.
func gatewayIn(ns string) (*gatewayv1.GatewayClass, *gatewayv1.Gateway) {
	class := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "switchboard-" + ns},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: routetable.ControllerName},
	}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{
			GatewayClassName: gatewayv1.ObjectName(class.Name),
			Listeners:        []gatewayv1.Listener{{Name: "http", Port: 8080, Protocol: gatewayv1.HTTPProtocolType}},
		},
	}
	return class, gw
}

// service returns a Service in ns selecting app=name pods.
func service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 8000}},
		},
	}
}

// readyEnginePod creates an engine Pod labelled app=app and marks it Running and Ready
// at ip. No engine runs behind it: status needs none.
func readyEnginePod(t *testing.T, c *testenv.Cluster, ns, name, app, ip string) *corev1.Pod {
	t.Helper()
	// The port is the default one a Pod without the port label has.
	return c.EnginePod(t, ns, name, "llama-3-8b", net.JoinHostPort(ip, strconv.Itoa(v1alpha1.DefaultEnginePort)),
		map[string]string{"app": app})
}

// TestPolicyStatusLifecycle walks a policy through every condition reason the API server
// lets it reach: InvalidParameters, NotAttached, NoReadyEndpoints, BackendNotFound and
// Ready, and checks each is cleared when its cause goes away.
func TestPolicyStatusLifecycle(t *testing.T) {
	c := startManager(t)
	k := c.Client
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rp-lifecycle-"}}
	c.Create(t, nsObj)
	ns := nsObj.Name

	// Scorer weights of 0 pass admission (the minimum is 0) but leave the weighted
	// strategy nothing to weigh: the router refuses them.
	rp := &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy"},
		Spec: v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted,
			Scorers: []v1alpha1.Scorer{
				{Name: v1alpha1.StrategyLeastRequest, Weight: ptr.To[int32](0)},
				{Name: v1alpha1.StrategyPrefixCache, Weight: ptr.To[int32](0)},
			},
		},
	}
	c.Create(t, rp)
	key := client.ObjectKeyFromObject(rp)
	got := waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonInvalidParameters, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonInvalidParameters,
	})
	t.Logf("invalid: %s", describe(got))

	// Fixing the weights makes it accepted; no route references it yet.
	got.Spec.Scorers[0].Weight = ptr.To[int32](1)
	if err := k.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonNotAttached,
	})

	// A route referencing the policy but attached to no Switchboard Gateway does not count.
	c.Create(t, service(ns, "engines"), routeTo(ns, "route", "gw", "policy", "engines"))
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, ready: v1alpha1.RoutingPolicyReasonNotAttached,
	})

	// Once the Gateway exists the route attaches, but no engine is ready behind it.
	class, gw := gatewayIn(ns)
	c.Create(t, class, gw)
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonNoReadyEndpoints, routes: 1,
	})

	// A ready engine Pod behind the Service makes the policy ready; one behind no
	// Service of the route does not count.
	pod := readyEnginePod(t, c, ns, "engine-0", "engines", "10.0.0.1")
	readyEnginePod(t, c, ns, "stray", "elsewhere", "10.0.0.2")
	got = waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonReady, routes: 1, endpoints: 1,
	})
	t.Logf("ready: %s", describe(got))

	// A second backend naming a missing Service: ResolvedRefs False, until it exists.
	var route gatewayv1.HTTPRoute
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "route"}, &route); err != nil {
		t.Fatal(err)
	}
	route.Spec.Rules[0].BackendRefs = routeTo(ns, "route", "gw", "policy", "engines", "more").Spec.Rules[0].BackendRefs
	if err := k.Update(ctx, &route); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonBackendNotFound,
		ready: v1alpha1.RoutingPolicyReasonReady, routes: 1, endpoints: 1,
	})
	c.Create(t, service(ns, "more"))
	readyEnginePod(t, c, ns, "engine-1", "more", "10.0.0.3")
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonReady, routes: 1, endpoints: 2,
	})

	// Pods that stop being ready stop counting.
	for _, name := range []string{pod.Name, "engine-1"} {
		var p corev1.Pod
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		c.SetPodReady(t, &p, p.Status.PodIP, false)
	}
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, ready: v1alpha1.RoutingPolicyReasonNoReadyEndpoints, routes: 1,
	})

	// Deleting the route detaches the policy.
	if err := k.Delete(ctx, &route); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonNotAttached,
	})
}

// TestPolicyStatusCrossNamespaceBackend checks that readyEndpoints counts the pods of a
// Service in another namespace only once a ReferenceGrant there lets the route use it,
// as the gateway does.
func TestPolicyStatusCrossNamespaceBackend(t *testing.T) {
	c := startManager(t)
	k := c.Client
	routes := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rp-routes-"}}
	engines := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rp-engines-"}}
	c.Create(t, routes, engines)
	ns, elsewhere := routes.Name, engines.Name

	rp := &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy"},
		Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
	}
	route := routeTo(ns, "route", "gw", "policy", "engines")
	route.Spec.Rules[0].BackendRefs[0].Namespace = ptr.To(gatewayv1.Namespace(elsewhere))
	class, gw := gatewayIn(ns)
	c.Create(t, rp, class, gw, route, service(elsewhere, "engines"))
	readyEnginePod(t, c, elsewhere, "engine-0", "engines", "10.0.1.1")
	key := client.ObjectKeyFromObject(rp)

	// Without a grant the gateway does not send to the Service (RefNotPermitted on the
	// route), so its pod is no endpoint of the policy; nothing is missing either.
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonNoReadyEndpoints, routes: 1,
	})

	c.Create(t, &gatewayv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: "routes-of-" + ns},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Namespace: gatewayv1.Namespace(ns)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
		},
	})
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonReady, routes: 1, endpoints: 1,
	})

	// A second pod there counts too: engine Pods in the granting namespace reach the
	// policy in the route's.
	readyEnginePod(t, c, elsewhere, "engine-1", "engines", "10.0.1.2")
	waitForStatus(t, k, key, want{
		accepted: v1alpha1.RoutingPolicyReasonAccepted, resolvedRefs: v1alpha1.RoutingPolicyReasonResolvedRefs,
		ready: v1alpha1.RoutingPolicyReasonReady, routes: 1, endpoints: 2,
	})
}
