package gatewaystatus_test

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/controller/gatewaystatus"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestInferencePoolStatus checks that an InferencePool an accepted route sends to shows
// the Gateway as its parent, Accepted and ResolvedRefs, that the route itself is
// accepted with its references resolved, that another controller's parent entry
// survives, and that the entry goes when no route sends to the pool any more.
func TestInferencePoolStatus(t *testing.T) {
	e := start(t, gatewaystatus.DefaultAddressPool)
	ctx := context.Background()
	ns := e.namespace(nil)
	pool, policy, ref := poolObjects(ns)
	e.c.Create(t, pool, policy, e.gateway(ns, "gw", "", listener("http", 80, "")),
		route(ns, "chat", gatewayv1.ParentReference{Name: "gw"}, rule(nil, ref)))

	// Another controller's entry, written before ours.
	foreign := inferencev1.ParentStatus{
		ParentRef:      inferencev1.ParentReference{Kind: "Gateway", Namespace: inferencev1.Namespace(ns), Name: "other"},
		ControllerName: "example.com/other",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
			LastTransitionTime: metav1.Now()}},
	}
	eventually(t, "the foreign parent entry is written", func() error {
		var p inferencev1.InferencePool
		if err := e.k.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
			return err
		}
		p.Status.Parents = append(p.Status.Parents, foreign)
		return e.k.Status().Update(ctx, &p)
	})

	e.waitForRoute(client.ObjectKey{Namespace: ns, Name: "chat"}, routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs})
	eventually(t, "the pool shows the Gateway as an accepting parent", func() error {
		var p inferencev1.InferencePool
		if err := e.k.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
			return err
		}
		ours, others := split(p.Status.Parents)
		if len(others) != 1 || others[0].ControllerName != foreign.ControllerName {
			return fmt.Errorf("other controllers' entries = %+v, want the foreign one kept", others)
		}
		if len(ours) != 1 || string(ours[0].ParentRef.Name) != "gw" || string(ours[0].ParentRef.Kind) != "Gateway" {
			return fmt.Errorf("our entries = %+v, want one for Gateway gw", ours)
		}
		if err := hasCondition(ours[0].Conditions, inferencev1.InferencePoolConditionAccepted, metav1.ConditionTrue, inferencev1.InferencePoolReasonAccepted, p.Generation); err != nil {
			return err
		}
		return hasCondition(ours[0].Conditions, inferencev1.InferencePoolConditionResolvedRefs, metav1.ConditionTrue, inferencev1.InferencePoolReasonResolvedRefs, p.Generation)
	})

	if err := e.k.Delete(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool's entry for the Gateway goes with the route", func() error {
		var p inferencev1.InferencePool
		if err := e.k.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
			return err
		}
		if ours, others := split(p.Status.Parents); len(ours) != 0 || len(others) != 1 {
			return fmt.Errorf("parents = %+v, want only the foreign one", p.Status.Parents)
		}
		return nil
	})
}

// poolObjects returns an InferencePool llm in ns, the least-request RoutingPolicy named
// like it and a backendRef to it.
func poolObjects(ns string) (*inferencev1.InferencePool, *v1alpha1.RoutingPolicy, gatewayv1.HTTPBackendRef) {
	pool := &inferencev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: inferencev1.InferencePoolSpec{
			Selector:    inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "llm"}},
			TargetPorts: []inferencev1.Port{{Number: 8000}},
		},
	}
	policy := &v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}}
	return pool, policy, poolRef("llm")
}

// poolRef returns a backendRef to the InferencePool name of the route's namespace.
func poolRef(name string) gatewayv1.HTTPBackendRef {
	return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
		Group: ptr.To(gatewayv1.Group(routetable.PoolGroup)), Kind: ptr.To(gatewayv1.Kind(routetable.PoolKind)), Name: gatewayv1.ObjectName(name),
	}}}
}

// split returns Switchboard's parent entries and the others'.
func split(parents []inferencev1.ParentStatus) (ours, others []inferencev1.ParentStatus) {
	for _, p := range parents {
		if string(p.ControllerName) == routetable.ControllerName {
			ours = append(ours, p)
		} else {
			others = append(others, p)
		}
	}
	return ours, others
}

// TestStatusWithoutInferencePoolCRD checks that on an API server without the Inference
// Extension's CRD, Gateways and routes still get their status: a Service backend
// resolves, and a backendRef to an InferencePool is a backend that is not found.
func TestStatusWithoutInferencePoolCRD(t *testing.T) {
	c := testenv.Start(t)
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("inferencepools.inference.networking.k8s.io")
	if err := c.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the API server no longer serves InferencePools", func() error {
		err := c.List(ctx, &inferencev1.InferencePoolList{})
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("list inferencepools: %v", err)
	})

	e := startOn(t, c, gatewaystatus.DefaultAddressPool)
	ns := e.namespace(nil)
	parent := gatewayv1.ParentReference{Name: "gw"}
	e.c.Create(t, e.gateway(ns, "gw", "", listener("http", 80, "")), service(ns, "engines"),
		route(ns, "chat", parent, rule(nil, backend(ns, "engines"))), route(ns, "pool", parent, rule(nil, poolRef("llm"))))

	e.waitForRoute(client.ObjectKey{Namespace: ns, Name: "chat"},
		routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs})
	e.waitForRoute(client.ObjectKey{Namespace: ns, Name: "pool"},
		routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonBackendNotFound})
}

// TestInferencePoolPickerRef checks that a pool whose spec.endpointPickerRef names a
// Service that does not exist is not served: the route's reference to it does not
// resolve (BackendNotFound) and the pool's ResolvedRefs is False (InvalidExtensionRef),
// both while the route stays accepted; once the Service exists, both resolve.
func TestInferencePoolPickerRef(t *testing.T) {
	e := start(t, gatewaystatus.DefaultAddressPool)
	ctx := context.Background()
	ns := e.namespace(nil)
	pool, policy, ref := poolObjects(ns)
	pool.Spec.EndpointPickerRef = &inferencev1.EndpointPickerRef{Name: "epp", Port: &inferencev1.Port{Number: 9002}}
	e.c.Create(t, pool, policy, e.gateway(ns, "gw", "", listener("http", 80, "")),
		route(ns, "chat", gatewayv1.ParentReference{Name: "gw"}, rule(nil, ref)))
	routeKey := client.ObjectKey{Namespace: ns, Name: "chat"}
	poolResolves := func(status metav1.ConditionStatus, reason inferencev1.InferencePoolReason) {
		t.Helper()
		eventually(t, fmt.Sprintf("the pool's ResolvedRefs is %s %s", status, reason), func() error {
			var p inferencev1.InferencePool
			if err := e.k.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
				return err
			}
			ours, _ := split(p.Status.Parents)
			if len(ours) != 1 {
				return fmt.Errorf("our entries = %+v, want one", ours)
			}
			if err := hasCondition(ours[0].Conditions, inferencev1.InferencePoolConditionAccepted, metav1.ConditionTrue, inferencev1.InferencePoolReasonAccepted, p.Generation); err != nil {
				return err
			}
			return hasCondition(ours[0].Conditions, inferencev1.InferencePoolConditionResolvedRefs, status, reason, p.Generation)
		})
	}

	e.waitForRoute(routeKey, routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonBackendNotFound})
	poolResolves(metav1.ConditionFalse, inferencev1.InferencePoolReasonInvalidExtensionRef)

	e.c.Create(t, service(ns, "epp"))
	e.waitForRoute(routeKey, routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs})
	poolResolves(metav1.ConditionTrue, inferencev1.InferencePoolReasonResolvedRefs)
}
