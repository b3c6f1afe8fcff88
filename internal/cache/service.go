package cache

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Service is the part of a Kubernetes Service the gateway needs to resolve an HTTPRoute
// backendRef to pods and ports: its name, the pods it selects and its ports.
//
// A Service with a selector selects the pods of its namespace that match it. A Service
// without one selects the pods its EndpointSlices' ready endpoints reference (targetRef
// kind Pod, in the Service's namespace): endpoints that name no pod, or a pod elsewhere,
// are not followed, so a hand-written EndpointSlice cannot widen a route beyond its
// Service's namespace.
//
// A Service selects pods' own endpoints (endpoint.Key.Port 0), never ranks. The Service
// equivalent of an InferencePool (poolService) has Ranks instead: it selects, of each pod
// its selector matches, the endpoint on every one of the pool's targetPorts.
//
// Selector, EndpointPods, Ports and Ranks are shared with every reader and MUST NOT be
// modified.
type Service struct {
	// Key is the Service's namespace and name.
	Key types.NamespacedName
	// Selector is the Service's Pod selector.
	Selector map[string]string
	// EndpointPods are, for a Service without a selector, the names of the pods its
	// EndpointSlices' ready endpoints reference.
	EndpointPods map[string]bool
	// Ports are the Service's TCP ports.
	Ports []ServicePort
	// Ranks are, for the Service equivalent of an InferencePool, the pool's targetPorts:
	// the ports of the endpoints it selects, each of which receives its traffic on its
	// own port. Empty for a Service.
	Ranks []int32
}

// ServicePort is one port of a Service.
type ServicePort struct {
	// Port is the Service port, which backendRefs name.
	Port int32
	// TargetPort is the pod port it forwards to: a number, or the name of a container
	// port.
	TargetPort intstr.IntOrString
	// AppProtocol is the port's application protocol, such as kubernetes.io/h2c; empty
	// when unset.
	AppProtocol string
}

// serviceFeed mirrors Services into s, reduced to what selects their pods and their
// ports; EndpointSlice changes re-read the Service they belong to.
func serviceFeed(s *Store[Service]) *feed[*corev1.Service] {
	f := &feed[*corev1.Service]{
		kind:      "service",
		newObject: func() *corev1.Service { return new(corev1.Service) },
		newList:   func() client.ObjectList { return new(corev1.ServiceList) },
		remove:    s.remove,
		batch:     s.batch,
		triggers:  []trigger{{object: &discoveryv1.EndpointSlice{}, keys: sliceService}},
	}
	f.apply = func(svc *corev1.Service) error {
		v := serviceFromObject(svc)
		if len(v.Selector) == 0 {
			// A read of the informer cache, in memory.
			pods, err := endpointPods(context.Background(), f.reader, v.Key)
			if err != nil {
				return err
			}
			v.EndpointPods = pods
		}
		s.set(v.Key, v)
		return nil
	}
	return f
}

// sliceService maps an EndpointSlice to the Service it belongs to.
func sliceService(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// endpointPods returns the names of the pods of svc's namespace that the ready
// endpoints of svc's EndpointSlices reference.
func endpointPods(ctx context.Context, r client.Reader, svc types.NamespacedName) (map[string]bool, error) {
	var slices discoveryv1.EndpointSliceList
	if err := r.List(ctx, &slices, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s: %w", svc, err)
	}
	pods := map[string]bool{}
	for _, slice := range slices.Items {
		for _, ep := range slice.Endpoints {
			ref := ep.TargetRef
			if ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != svc.Namespace) {
				continue
			}
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			pods[ref.Name] = true
		}
	}
	return pods, nil
}

// serviceFromObject returns the Service value of svc, without its EndpointPods.
func serviceFromObject(svc *corev1.Service) Service {
	s := Service{
		Key:      types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		Selector: svc.Spec.Selector,
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			s.Ports = append(s.Ports, ServicePort{Port: p.Port, TargetPort: p.TargetPort, AppProtocol: ptr.Deref(p.AppProtocol, "")})
		}
	}
	return s
}

// Selects reports whether the Service selects p: p is in the Service's namespace and
// carries every label of a non-empty selector, or, without a selector, is one of its
// EndpointPods; and p is a pod's own endpoint, or, for a pool's Service, an endpoint on
// one of its Ranks.
func (s Service) Selects(p *Pod) bool {
	if p.Key.Namespace != s.Key.Namespace {
		return false
	}
	if len(s.Ranks) > 0 {
		return slices.Contains(s.Ranks, p.Port) && matchesLabels(s.Selector, p.Labels)
	}
	if p.Key.IsRank() {
		return false
	}
	if len(s.Selector) == 0 {
		return s.EndpointPods[p.Key.Name]
	}
	return matchesLabels(s.Selector, p.Labels)
}

// matchesLabels reports whether labels carry every label of selector, which selects
// nothing when empty.
func matchesLabels(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// AppProtocol returns the application protocol of the Service's port port, or "".
func (s Service) AppProtocol(port int32) string {
	for _, sp := range s.Ports {
		if sp.Port == port {
			return sp.AppProtocol
		}
	}
	return ""
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
// no such port or p has no such named port. For a pool's Service, whose endpoints each
// receive their traffic on their own port, it is p's port when p is on one of its Ranks.
func (s Service) TargetPort(port int32, p *Pod) (int32, bool) {
	if len(s.Ranks) > 0 {
		return p.Port, s.HasPort(port) && slices.Contains(s.Ranks, p.Port)
	}
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
