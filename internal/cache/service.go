package cache

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Service is the part of a Kubernetes Service the gateway needs to resolve an HTTPRoute
// backendRef to engine pods: its name and its Pod selector.
//
// Selector is shared with every reader and MUST NOT be modified.
type Service struct {
	// Key is the Service's namespace and name.
	Key types.NamespacedName
	// Selector is the Service's Pod selector; a Service without one selects no pods.
	Selector map[string]string
}

// serviceFromObject returns the Service value of svc.
func serviceFromObject(svc *corev1.Service) Service {
	return Service{
		Key:      types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		Selector: svc.Spec.Selector,
	}
}

// Selects reports whether the Service's selector selects p: p is in the Service's
// namespace and carries every label of a non-empty selector.
func (s Service) Selects(p *Pod) bool {
	if p.Key.Namespace != s.Key.Namespace || len(s.Selector) == 0 {
		return false
	}
	for k, v := range s.Selector {
		if got, ok := p.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
