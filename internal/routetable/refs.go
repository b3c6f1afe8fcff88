package routetable

import (
	"crypto/tls"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// resolver resolves the references of route rules: backendRefs (and mirror backends) to
// Services, through ReferenceGrants across namespaces, and ExtensionRefs to
// RoutingPolicies; and those of listeners: tls.certificateRefs to Secrets.
type resolver struct {
	grants        grantIndex
	serviceExists func(types.NamespacedName) bool
	pool          func(types.NamespacedName) (Pool, bool)
	policyState   func(types.NamespacedName) (bool, error)
	certificate   func(types.NamespacedName) (Certificate, bool)
}

func newResolver(in Input) *resolver {
	return &resolver{grants: newGrantIndex(in.ReferenceGrants), serviceExists: in.ServiceExists, pool: in.Pool,
		policyState: in.Policy, certificate: in.Certificate}
}

// policy reports whether the RoutingPolicy key exists and why it cannot be applied.
func (r *resolver) policy(key types.NamespacedName) (bool, error) {
	if r.policyState == nil {
		return true, nil
	}
	return r.policyState(key)
}

// backend resolves ref, written in a route of routeNamespace, to a Service or
// InferencePool backend, or says why the gateway cannot send to it.
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
	if group == PoolGroup && kind == PoolKind {
		return r.poolBackend(routeNamespace, target, weight, reject)
	}
	switch {
	case group != "" || kind != "Service":
		return reject(gatewayv1.RouteReasonInvalidKind, "backendRef kind %s is not supported: only core Services and %s/%s",
			groupKind(group, kind), PoolGroup, PoolKind)
	case target.Namespace != routeNamespace && !r.grants.permits(routeKind, routeNamespace, "", "Service", target):
		return reject(gatewayv1.RouteReasonRefNotPermitted, "no ReferenceGrant in namespace %s permits HTTPRoutes in %s to reference Service %s",
			target.Namespace, routeNamespace, target.Name)
	case ref.Port == nil:
		return reject(gatewayv1.RouteReasonUnsupportedValue, "backendRef to Service %s has no port", target)
	case r.serviceExists != nil && !r.serviceExists(target):
		return reject(gatewayv1.RouteReasonBackendNotFound, "Service %s not found", target)
	}
	return Backend{Service: target, Port: int32(*ref.Port), Weight: weight}, RejectedBackend{}, true
}

// poolBackend resolves a backendRef to the InferencePool target. Its port, optional, is
// not the pods': the pool's targetPorts are.
func (r *resolver) poolBackend(routeNamespace string, target types.NamespacedName, weight int32,
	reject func(gatewayv1.RouteConditionReason, string, ...any) (Backend, RejectedBackend, bool)) (Backend, RejectedBackend, bool) {
	if target.Namespace != routeNamespace && !r.grants.permits(routeKind, routeNamespace, PoolGroup, PoolKind, target) {
		return reject(gatewayv1.RouteReasonRefNotPermitted, "no ReferenceGrant in namespace %s permits HTTPRoutes in %s to reference InferencePool %s",
			target.Namespace, routeNamespace, target.Name)
	}
	var pool Pool
	ok := false
	if r.pool != nil {
		pool, ok = r.pool(target)
	}
	if !ok {
		return reject(gatewayv1.RouteReasonBackendNotFound, "InferencePool %s not found", target)
	}
	if problem := pool.PickerProblem(r.serviceExists); problem != "" {
		return reject(gatewayv1.RouteReasonBackendNotFound, "InferencePool %s: %s", target, problem)
	}
	return Backend{Service: PoolService(target), Port: pool.Port(), Weight: weight, Pool: &pool}, RejectedBackend{}, true
}

// certificates resolves the tls.certificateRefs of an HTTPS listener of a Gateway in
// gwNamespace: the usable certificates in spec order, and a problem for every reference
// that does not resolve. A reference into another namespace needs a ReferenceGrant there
// (RefNotPermitted); then it must name a core Secret that exists and holds a certificate
// (InvalidCertificateRef).
func (r *resolver) certificates(gwNamespace string, refs []gatewayv1.SecretObjectReference) ([]*tls.Certificate, []listenerProblem) {
	var certs []*tls.Certificate
	var problems []listenerProblem
	problem := func(reason gatewayv1.ListenerConditionReason, format string, args ...any) {
		problems = append(problems, listenerProblem{reason: reason, message: fmt.Sprintf(format, args...)})
	}
	if len(refs) == 0 {
		problem(gatewayv1.ListenerReasonInvalidCertificateRef, "An HTTPS listener needs a certificate: tls.certificateRefs is empty")
	}
	for i, ref := range refs {
		group, kind := "", "Secret"
		if ref.Group != nil {
			group = string(*ref.Group)
		}
		if ref.Kind != nil {
			kind = string(*ref.Kind)
		}
		target := types.NamespacedName{Namespace: gwNamespace, Name: string(ref.Name)}
		if ref.Namespace != nil {
			target.Namespace = string(*ref.Namespace)
		}
		switch {
		case target.Namespace != gwNamespace && !r.grants.permits(gatewayKind, gwNamespace, group, kind, target):
			problem(gatewayv1.ListenerReasonRefNotPermitted, "tls.certificateRefs[%d]: no ReferenceGrant in namespace %s permits Gateways in %s to reference %s %s",
				i, target.Namespace, gwNamespace, groupKind(group, kind), target.Name)
			continue
		case group != "" || kind != "Secret":
			problem(gatewayv1.ListenerReasonInvalidCertificateRef, "tls.certificateRefs[%d]: kind %s is not supported: only core Secrets", i, groupKind(group, kind))
			continue
		}
		var cert Certificate
		found := false
		if r.certificate != nil {
			cert, found = r.certificate(target)
		}
		switch {
		case !found:
			problem(gatewayv1.ListenerReasonInvalidCertificateRef, "tls.certificateRefs[%d]: Secret %s not found", i, target)
		case cert.TLS == nil:
			problem(gatewayv1.ListenerReasonInvalidCertificateRef, "tls.certificateRefs[%d]: Secret %s: %v", i, target, cert.Invalid)
		default:
			certs = append(certs, cert.TLS)
		}
	}
	return certs, problems
}

// listenerProblem is one unresolved reference of a listener.
type listenerProblem struct {
	reason  gatewayv1.ListenerConditionReason
	message string
}

// grantIndex answers whether a ReferenceGrant lets objects of a Gateway API kind in one
// namespace (HTTPRoutes for backendRefs, Gateways for certificateRefs) reference objects
// of a kind in another.
type grantIndex map[grantKey]bool

// grantKey is one permission: fromKind objects of the Gateway API group in fromNamespace
// may reference the toGroup/toKind object name in toNamespace, or every one when name is
// empty.
type grantKey struct {
	fromKind, fromNamespace      string
	toGroup, toKind, toNamespace string
	name                         string
}

func newGrantIndex(grants []*gatewayv1.ReferenceGrant) grantIndex {
	idx := grantIndex{}
	for _, g := range grants {
		if g == nil {
			continue
		}
		for _, from := range g.Spec.From {
			if string(from.Group) != gatewayGroup {
				continue
			}
			for _, to := range g.Spec.To {
				k := grantKey{
					fromKind: string(from.Kind), fromNamespace: string(from.Namespace),
					toGroup: string(to.Group), toKind: string(to.Kind), toNamespace: g.Namespace,
				}
				if to.Name != nil {
					k.name = string(*to.Name)
				}
				idx[k] = true
			}
		}
	}
	return idx
}

// permits reports whether a fromKind object in fromNamespace may reference the
// toGroup/toKind object target.
func (g grantIndex) permits(fromKind, fromNamespace, toGroup, toKind string, target types.NamespacedName) bool {
	k := grantKey{fromKind: fromKind, fromNamespace: fromNamespace, toGroup: toGroup, toKind: toKind, toNamespace: target.Namespace}
	if g[k] {
		return true
	}
	k.name = target.Name
	return g[k]
}
