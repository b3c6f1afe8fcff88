package routetable

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// resolver resolves the references of route rules: backendRefs (and mirror backends) to
// Services, through ReferenceGrants across namespaces, and ExtensionRefs to
// RoutingPolicies.
type resolver struct {
	grants        grantIndex
	serviceExists func(types.NamespacedName) bool
	policyState   func(types.NamespacedName) (bool, error)
}

func newResolver(in Input) *resolver {
	return &resolver{grants: newGrantIndex(in.ReferenceGrants), serviceExists: in.ServiceExists, policyState: in.Policy}
}

// policy reports whether the RoutingPolicy key exists and why it cannot be applied.
func (r *resolver) policy(key types.NamespacedName) (bool, error) {
	if r.policyState == nil {
		return true, nil
	}
	return r.policyState(key)
}

// backend resolves ref, written in a route of routeNamespace, to a Service backend, or
// says why the gateway cannot send to it.
func (r *resolver) backend(routeNamespace string, ref gatewayv1.BackendRef) (Backend, RejectedBackend, bool) {
	group, kind := "", "Service"
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	target := types.NamespacedName{Namespace: routeNamespace, Name: string(ref.Name)}
	if ref.Namespace != nil {
		target.Namespace = string(*ref.Namespace)
	}
	weight := int32(1)
	if ref.Weight != nil {
		weight = *ref.Weight
	}
	reject := func(reason gatewayv1.RouteConditionReason, format string, args ...any) (Backend, RejectedBackend, bool) {
		return Backend{}, RejectedBackend{
			Group: group, Kind: kind, Target: target, Weight: weight,
			Reason: reason, Message: fmt.Sprintf(format, args...),
		}, false
	}
	switch {
	case group != "" || kind != "Service":
		return reject(gatewayv1.RouteReasonInvalidKind, "backendRef kind %s is not supported: only core Services", groupKind(group, kind))
	case target.Namespace != routeNamespace && !r.grants.permits(routeNamespace, target):
		return reject(gatewayv1.RouteReasonRefNotPermitted, "no ReferenceGrant in namespace %s permits HTTPRoutes in %s to reference Service %s",
			target.Namespace, routeNamespace, target.Name)
	case ref.Port == nil:
		return reject(gatewayv1.RouteReasonUnsupportedValue, "backendRef to Service %s has no port", target)
	case r.serviceExists != nil && !r.serviceExists(target):
		return reject(gatewayv1.RouteReasonBackendNotFound, "Service %s not found", target)
	}
	return Backend{Service: target, Port: int32(*ref.Port), Weight: weight}, RejectedBackend{}, true
}

// grantIndex answers whether a ReferenceGrant lets HTTPRoutes in one namespace reference
// a Service in another.
type grantIndex map[grantKey]bool

type grantKey struct {
	from, to string // namespaces
	service  string // "" for every Service in the namespace
}

func newGrantIndex(grants []*gatewayv1.ReferenceGrant) grantIndex {
	idx := grantIndex{}
	for _, g := range grants {
		if g == nil {
			continue
		}
		for _, from := range g.Spec.From {
			if string(from.Group) != gatewayGroup || string(from.Kind) != routeKind {
				continue
			}
			for _, to := range g.Spec.To {
				if to.Group != "" || to.Kind != "Service" {
					continue
				}
				k := grantKey{from: string(from.Namespace), to: g.Namespace}
				if to.Name != nil {
					k.service = string(*to.Name)
				}
				idx[k] = true
			}
		}
	}
	return idx
}

func (g grantIndex) permits(fromNamespace string, target types.NamespacedName) bool {
	return g[grantKey{from: fromNamespace, to: target.Namespace}] ||
		g[grantKey{from: fromNamespace, to: target.Namespace, service: target.Name}]
}
