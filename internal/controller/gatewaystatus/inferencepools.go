package gatewaystatus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// poolParents maps each InferencePool that a rule of a route of Switchboard's Gateways
// sends to, or would but for the pool's own references (its endpoint picker), to those
// Gateways and whether the route is accepted by each.
func poolParents(routes []routetable.RouteStatus) map[types.NamespacedName]map[types.NamespacedName]bool {
	out := map[types.NamespacedName]map[types.NamespacedName]bool{}
	add := func(pool types.NamespacedName, st routetable.RouteStatus) {
		gateways := out[pool]
		if gateways == nil {
			gateways = map[types.NamespacedName]bool{}
			out[pool] = gateways
		}
		for _, p := range st.Parents {
			gateways[p.Gateway] = gateways[p.Gateway] || p.Accepted
		}
	}
	for _, st := range routes {
		for _, rule := range st.Compiled {
			for _, b := range rule.Backends {
				if b.Pool != nil {
					add(b.Pool.Key, st)
				}
			}
			for _, b := range rule.RejectedBackends {
				// A pool the route may not reference (RefNotPermitted) has no parent in it.
				if b.Group == routetable.PoolGroup && b.Kind == routetable.PoolKind && b.Reason == gatewayv1.RouteReasonBackendNotFound {
					add(b.Target, st)
				}
			}
		}
	}
	return out
}

// writePools writes Switchboard's entries of the status.parents of every one of pools:
// one per Switchboard Gateway a route sends to the pool through, Accepted when the route
// is accepted there, ResolvedRefs when the pool's endpoint picker reference resolves
// (serviceExists tells which Services exist); the entries of other controllers are kept.
func (r *Reconciler) writePools(ctx context.Context, pools []inferencev1.InferencePool, routes []routetable.RouteStatus,
	serviceExists func(types.NamespacedName) bool) error {
	parents := poolParents(routes)
	var errs []error
	for i := range pools {
		pool := &pools[i]
		next := pool.DeepCopy()
		next.Status.Parents = poolStatusParents(pool, parents[client.ObjectKeyFromObject(pool)], serviceExists)
		errs = append(errs, r.patchStatus(ctx, pool, next, pool.Status, next.Status))
	}
	return errors.Join(errs...)
}

// poolStatusParents returns pool's status.parents with Switchboard's entries, one per
// Gateway of gateways (true: a route through it is accepted), in place of its old ones.
func poolStatusParents(pool *inferencev1.InferencePool, gateways map[types.NamespacedName]bool,
	serviceExists func(types.NamespacedName) bool) []inferencev1.ParentStatus {
	out := []inferencev1.ParentStatus{}
	old := map[types.NamespacedName]inferencev1.ParentStatus{}
	for _, p := range pool.Status.Parents {
		if string(p.ControllerName) != routetable.ControllerName {
			out = append(out, p)
			continue
		}
		old[types.NamespacedName{Namespace: string(p.ParentRef.Namespace), Name: string(p.ParentRef.Name)}] = p
	}
	keys := make([]types.NamespacedName, 0, len(gateways))
	for k := range gateways {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	of := routetable.PoolOf(pool)
	problem := of.PickerProblem(serviceExists)
	for _, gw := range keys {
		p := old[gw] // keeps the conditions' transition times
		p.ControllerName = inferencev1.ControllerName(routetable.ControllerName)
		p.ParentRef = inferencev1.ParentReference{Group: new(inferencev1.Group(gatewayv1.GroupName)), Kind: "Gateway",
			Namespace: inferencev1.Namespace(gw.Namespace), Name: inferencev1.ObjectName(gw.Name)}
		p.Conditions = slices.Clone(p.Conditions)
		if gateways[gw] {
			setCondition(&p.Conditions, string(inferencev1.InferencePoolConditionAccepted), true, inferencev1.InferencePoolReasonAccepted,
				"The Gateway routes requests to the pool's pods", pool.Generation)
		} else {
			setCondition(&p.Conditions, string(inferencev1.InferencePoolConditionAccepted), false, inferencev1.InferencePoolReasonHTTPRouteNotAccepted,
				"No HTTPRoute that sends to the pool is accepted by the Gateway; see the routes' status", pool.Generation)
		}
		if problem != "" {
			setCondition(&p.Conditions, string(inferencev1.InferencePoolConditionResolvedRefs), false, inferencev1.InferencePoolReasonInvalidExtensionRef,
				problem+"; the Gateway does not serve the pool", pool.Generation)
		} else {
			setCondition(&p.Conditions, string(inferencev1.InferencePoolConditionResolvedRefs), true, inferencev1.InferencePoolReasonResolvedRefs,
				fmt.Sprintf("Switchboard picks the pool's endpoints itself, with RoutingPolicy %s; spec.endpointPickerRef is not called", of.Policy), pool.Generation)
		}
		out = append(out, p)
	}
	return out
}

// servesPools reports whether the API server knows InferencePools: without the Inference
// Extension's CRD there is nothing to watch.
func servesPools(mgr ctrl.Manager) bool {
	return cache.KnowsKind(mgr, schema.GroupKind{Group: inferencev1.GroupName, Kind: routetable.PoolKind})
}
