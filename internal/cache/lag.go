package cache

import (
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// PodsBehind reports whether the cache's pods of some scope (known: those of a set of
// namespaces, say, or those serving one base model there) differ from the engine Pods an
// informer lists in the same scope (listed) in address, readiness, termination or labels.
// Both are fed by the same watch, but by different controllers, so a Pod event can reach
// a reconciler before the cache has applied it, and after a failover the cache may still
// show what the previous listing did; a reconciler acting on pods should wait while this
// holds.
func PodsBehind(listed []corev1.Pod, known map[endpoint.Key]*Pod) bool {
	count := 0
	for i := range listed {
		ep, isEngine, err := EndpointFromPod(&listed[i])
		p, ok := known[endpoint.Key{Namespace: listed[i].Namespace, Name: listed[i].Name}]
		if err != nil || !isEngine {
			// The cache drops Pods that are not valid engine Pods.
			if ok {
				return true
			}
			continue
		}
		if !ok {
			return true
		}
		count++
		if p.Address != ep.Address || p.Ready != ep.Ready || p.Terminating != ep.Terminating ||
			!maps.Equal(p.Labels, ep.Labels) {
			return true
		}
	}
	return count != len(known)
}
