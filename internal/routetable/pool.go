package routetable

import (
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
