package routetable

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// The InferencePool backendRef kind (Gateway API Inference Extension).
const (
	PoolGroup = inferencev1.GroupName
	PoolKind  = "InferencePool"
	// PoolPolicyAnnotation on an InferencePool names the RoutingPolicy, in the pool's
	// namespace, that routes the requests sent to the pool; without it, the policy named
	// like the pool does. A rule's own RoutingPolicy filter takes precedence.
	PoolPolicyAnnotation = "inference.switchboard.dev/routing-policy"
)

// Pool is what the gateway needs of an InferencePool: the pods it selects, the ports
// they serve on and the RoutingPolicy that routes to them. Each port of each selected pod
// is an endpoint of its own (a data-parallel rank, as the Inference Extension models
// them).
type Pool struct {
	// Key is the pool's namespace and name.
	Key types.NamespacedName
	// Selector is spec.selector.matchLabels: the pool's pods, in its namespace.
	Selector map[string]string
	// Ports are spec.targetPorts, in spec order.
	Ports []int32
	// Policy is the RoutingPolicy that routes the pool's requests (PoolPolicyAnnotation).
	Policy types.NamespacedName
	// Picker is spec.endpointPickerRef; nil when the pool names no endpoint picker.
	Picker *PickerRef
}

// PickerRef is an InferencePool's spec.endpointPickerRef: the endpoint picker that
// Envoy-based gateways ask. Switchboard's gateway routes a pool with the pool's
// RoutingPolicy and needs no picker, but, as the Inference Extension specifies, it does
// not serve a pool whose picker reference does not resolve (PickerProblem).
type PickerRef struct {
	// Group and Kind are the referent's, "" and "Service" when unset.
	Group, Kind string
	// Name is the referent's name, in the pool's namespace.
	Name string
}

// PickerProblem says why the pool's endpoint picker reference does not resolve, or
// returns "" when it does or the pool names none. The picker must be a core Service in
// the pool's namespace; serviceExists (nil: not checked) tells whether it exists.
func (p Pool) PickerProblem(serviceExists func(types.NamespacedName) bool) string {
	ref := p.Picker
	switch {
	case ref == nil:
		return ""
	case ref.Group != "" || ref.Kind != "Service":
		return fmt.Sprintf("endpointPickerRef kind %s is not supported: only a core Service", groupKind(ref.Group, ref.Kind))
	case ref.Name == "":
		return "endpointPickerRef names no Service"
	case serviceExists != nil && !serviceExists(types.NamespacedName{Namespace: p.Key.Namespace, Name: ref.Name}):
		return fmt.Sprintf("endpointPickerRef Service %s/%s not found", p.Key.Namespace, ref.Name)
	}
	return ""
}

// PoolOf returns the Pool of p. Its Selector and Ports MUST NOT be modified.
func PoolOf(p *inferencev1.InferencePool) Pool {
	pool := Pool{Key: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, Policy: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}}
	if name := p.Annotations[PoolPolicyAnnotation]; name != "" {
		pool.Policy.Name = name
	}
	sel := make(map[string]string, len(p.Spec.Selector.MatchLabels))
	for k, v := range p.Spec.Selector.MatchLabels {
		sel[string(k)] = string(v)
	}
	pool.Selector = sel
	for _, port := range p.Spec.TargetPorts {
		pool.Ports = append(pool.Ports, int32(port.Number))
	}
	if ref := p.Spec.EndpointPickerRef; ref != nil {
		pool.Picker = &PickerRef{Kind: "Service", Name: string(ref.Name)}
		if ref.Group != nil {
			pool.Picker.Group = string(*ref.Group)
		}
		if ref.Kind != "" {
			pool.Picker.Kind = string(ref.Kind)
		}
	}
	return pool
}

// Port is the port a backend to the pool is filed under (Backend.Port): the first of
// Ports, 0 when there is none. The pool's endpoints are on every one of Ports.
func (p Pool) Port() int32 {
	if len(p.Ports) == 0 {
		return 0
	}
	return p.Ports[0]
}

// PoolService is the key under which a pool's pods and ports are kept beside the
// Services' (Backend.Service of a pool backend): the pool's name behind a prefix that no
// Service name can have, as names cannot contain "/".
func PoolService(pool types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: pool.Namespace, Name: poolServicePrefix + pool.Name}
}

const poolServicePrefix = "inferencepool/"
