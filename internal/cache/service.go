package cache

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Service is the part of a Kubernetes Service the gateway needs to resolve an HTTPRoute
// backendRef to pods and ports: its name, Pod selector and ports.
//
// Selector and Ports are shared with every reader and MUST NOT be modified.
type Service struct {
	// Key is the Service's namespace and name.
	Key types.NamespacedName
	// Selector is the Service's Pod selector; a Service without one selects no pods.
	Selector map[string]string
	// Ports are the Service's TCP ports.
	Ports []ServicePort
}

// ServicePort is one port of a Service.
type ServicePort struct {
	// Port is the Service port, which backendRefs name.
	Port int32
	// TargetPort is the pod port it forwards to: a number, or the name of a container
	// port.
	TargetPort intstr.IntOrString
}

// serviceFromObject returns the Service value of svc.
func serviceFromObject(svc *corev1.Service) Service {
	s := Service{
		Key:      types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		Selector: svc.Spec.Selector,
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			s.Ports = append(s.Ports, ServicePort{Port: p.Port, TargetPort: p.TargetPort})
		}
	}
	return s
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

// HasPort reports whether the Service has the TCP port port.
func (s Service) HasPort(port int32) bool {
	for _, sp := range s.Ports {
		if sp.Port == port {
			return true
		}
	}
	return false
}

// TargetPort resolves the Service port port to the port of p that receives its traffic,
// as kube-proxy does: the port's numeric targetPort (the port itself when unset), or the
// number of p's container port named by targetPort. It reports false when the Service has
// no such port or p has no such named port.
func (s Service) TargetPort(port int32, p *Pod) (int32, bool) {
	for _, sp := range s.Ports {
		if sp.Port != port {
			continue
		}
		switch {
		case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
			n, ok := p.NamedPorts[sp.TargetPort.StrVal]
			return n, ok
		case sp.TargetPort.IntVal != 0:
			return sp.TargetPort.IntVal, true
		default:
			return sp.Port, true
		}
	}
	return 0, false
}
