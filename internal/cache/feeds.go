package cache

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// podFeed mirrors engine Pods, those labelled switchboard.dev/model, into c. A Pod that
// loses the label, or carries an invalid engine or port label, is removed.
func podFeed(c *Cache) *feed[*corev1.Pod] {
	f := anyPodFeed(c, EndpointFromPod)
	f.predicates = []predicate.Predicate{EnginePods}
	return f
}

// backendPodFeed mirrors every Pod into c: engine Pods as podFeed does, any other Pod as
// an endpoint without a model, which Services select for plain Gateway API routing.
func backendPodFeed(c *Cache) *feed[*corev1.Pod] {
	return anyPodFeed(c, func(pod *corev1.Pod) (endpoint.Endpoint, bool, error) {
		if _, ok := pod.Labels[v1alpha1.LabelModel]; ok {
			return EndpointFromPod(pod)
		}
		return plainEndpoint(pod), true, nil
	})
}

// anyPodFeed mirrors the Pods for which toEndpoint reports true into c.
func anyPodFeed(c *Cache, toEndpoint func(*corev1.Pod) (endpoint.Endpoint, bool, error)) *feed[*corev1.Pod] {
	return &feed[*corev1.Pod]{
		kind:      "pod",
		newObject: func() *corev1.Pod { return new(corev1.Pod) },
		newList:   func() client.ObjectList { return new(corev1.PodList) },
		apply: func(pod *corev1.Pod) error {
			key := endpoint.Key{Namespace: pod.Namespace, Name: pod.Name}
			ep, ok, err := toEndpoint(pod)
			if err != nil || !ok {
				c.DeletePod(key)
				return err
			}
			c.UpsertPod(ep)
			return nil
		},
		remove: func(k types.NamespacedName) {
			c.DeletePod(endpoint.Key{Namespace: k.Namespace, Name: k.Name})
		},
	}
}

// EnginePods passes events of Pods that are, or were until this update, engine Pods
// (labelled switchboard.dev/model), so that a Pod losing the label is seen too.
var EnginePods = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return isEnginePod(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return isEnginePod(e.Object) },
	GenericFunc: func(e event.GenericEvent) bool { return isEnginePod(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return isEnginePod(e.ObjectOld) || isEnginePod(e.ObjectNew)
	},
}

// isEnginePod reports whether obj carries the switchboard.dev/model label.
func isEnginePod(obj client.Object) bool {
	_, ok := obj.GetLabels()[v1alpha1.LabelModel]
	return ok
}

// EndpointFromPod returns the endpoint the cache records for pod, or false if pod is not
// an engine Pod. It fails if the engine or port label is invalid; the cache drops such
// Pods.
func EndpointFromPod(pod *corev1.Pod) (endpoint.Endpoint, bool, error) {
	model := pod.Labels[v1alpha1.LabelModel]
	if model == "" {
		return endpoint.Endpoint{}, false, nil
	}
	engine := endpoint.EngineVLLM
	if v, ok := pod.Labels[v1alpha1.LabelEngine]; ok {
		engine = endpoint.Engine(v)
		if engine != endpoint.EngineVLLM && engine != endpoint.EngineSGLang {
			return endpoint.Endpoint{}, false, fmt.Errorf("label %s=%q: want %q or %q",
				v1alpha1.LabelEngine, v, endpoint.EngineVLLM, endpoint.EngineSGLang)
		}
	}
	port := int64(v1alpha1.DefaultEnginePort)
	if v, ok := pod.Labels[v1alpha1.LabelPort]; ok {
		var err error
		if port, err = strconv.ParseInt(v, 10, 32); err != nil || port < 1 || port > 65535 {
			return endpoint.Endpoint{}, false, fmt.Errorf("label %s=%q: want a port number from 1 to 65535",
				v1alpha1.LabelPort, v)
		}
	}
	ep := plainEndpoint(pod)
	ep.Port, ep.BaseModel, ep.Engine, ep.Slots = int32(port), model, engine, declaredSlots(pod)
	return ep, true, nil
}

// slotFlags are the engine flags that bound the requests an engine runs at once: vLLM's
// and SGLang's, each also spelt with underscores, as both engines accept.
var slotFlags = []string{"--max-num-seqs", "--max_num_seqs", "--max-running-requests", "--max_running_requests"}

// declaredSlots returns the most requests pod's engine runs at once, as the first slot
// flag on its containers' command lines declares it (--flag value or --flag=value), or 0
// when none does or the value is not a positive number. The words are split at white
// space, so a command line written as one shell string is read too. Knowing an engine's
// slots before it is first seen queueing lets a prediction tell a full batch from a free
// slot from the start, rather than after the first requests queued
// (endpoint.Profile.Slots).
func declaredSlots(pod *corev1.Pod) int {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		words := strings.Fields(strings.Join(slices.Concat(c.Command, c.Args), " "))
		for j, w := range words {
			flag, value, joined := strings.Cut(w, "=")
			if !slices.Contains(slotFlags, flag) {
				continue
			}
			if !joined && j+1 < len(words) {
				value = words[j+1]
			}
			if n, err := strconv.Atoi(value); err == nil && n > 0 {
				return n
			}
			return 0
		}
	}
	return 0
}

// plainEndpoint returns the endpoint of pod without its engine labels.
func plainEndpoint(pod *corev1.Pod) endpoint.Endpoint {
	var named map[string]int32
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name != "" && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
				if named == nil {
					named = make(map[string]int32)
				}
				named[p.Name] = p.ContainerPort
			}
		}
	}
	return endpoint.Endpoint{
		Key:         endpoint.Key{Namespace: pod.Namespace, Name: pod.Name},
		Address:     pod.Status.PodIP,
		NamedPorts:  named,
		Labels:      pod.Labels,
		Ready:       isRunningAndReady(pod),
		Terminating: pod.DeletionTimestamp != nil,
	}
}

// isRunningAndReady reports whether pod is Running with condition Ready=True.
func isRunningAndReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// adapterFeed mirrors ModelAdapters into c: each adapter becomes a model served by the
// pods in its status.instances.
func adapterFeed(c *Cache) *feed[*v1alpha1.ModelAdapter] {
	return &feed[*v1alpha1.ModelAdapter]{
		kind:      "modeladapter",
		newObject: func() *v1alpha1.ModelAdapter { return new(v1alpha1.ModelAdapter) },
		newList:   func() client.ObjectList { return new(v1alpha1.ModelAdapterList) },
		apply: func(ma *v1alpha1.ModelAdapter) error {
			key := endpoint.Key{Namespace: ma.Namespace, Name: ma.Name}
			c.SetAdapterInstances(key, ma.Spec.BaseModel, ma.Status.Instances)
			return nil
		},
		remove: func(k types.NamespacedName) {
			c.DeleteAdapter(endpoint.Key{Namespace: k.Namespace, Name: k.Name})
		},
	}
}

// objectFeed mirrors objects of one kind unchanged into s. The informer cache hands the
// feed a deep copy, so the stored object is shared with nobody but the store's readers.
func objectFeed[T client.Object](kind string, s *Store[T], newObject func() T, newList func() client.ObjectList) *feed[T] {
	return &feed[T]{
		kind:      kind,
		newObject: newObject,
		newList:   newList,
		apply: func(obj T) error {
			s.set(client.ObjectKeyFromObject(obj), obj)
			return nil
		},
		remove: s.remove,
		batch:  s.batch,
	}
}

// policyFeed mirrors RoutingPolicies into s.
func policyFeed(s *Store[*v1alpha1.RoutingPolicy]) *feed[*v1alpha1.RoutingPolicy] {
	return objectFeed("routingpolicy", s,
		func() *v1alpha1.RoutingPolicy { return new(v1alpha1.RoutingPolicy) },
		func() client.ObjectList { return new(v1alpha1.RoutingPolicyList) })
}

// routeFeed mirrors HTTPRoutes into s.
func routeFeed(s *Store[*gatewayv1.HTTPRoute]) *feed[*gatewayv1.HTTPRoute] {
	return objectFeed("httproute", s,
		func() *gatewayv1.HTTPRoute { return new(gatewayv1.HTTPRoute) },
		func() client.ObjectList { return new(gatewayv1.HTTPRouteList) })
}

// gatewayFeed mirrors Gateways into s.
func gatewayFeed(s *Store[*gatewayv1.Gateway]) *feed[*gatewayv1.Gateway] {
	return objectFeed("gateway", s,
		func() *gatewayv1.Gateway { return new(gatewayv1.Gateway) },
		func() client.ObjectList { return new(gatewayv1.GatewayList) })
}

// gatewayClassFeed mirrors GatewayClasses into s.
func gatewayClassFeed(s *Store[*gatewayv1.GatewayClass]) *feed[*gatewayv1.GatewayClass] {
	return objectFeed("gatewayclass", s,
		func() *gatewayv1.GatewayClass { return new(gatewayv1.GatewayClass) },
		func() client.ObjectList { return new(gatewayv1.GatewayClassList) })
}

// referenceGrantFeed mirrors ReferenceGrants into s.
func referenceGrantFeed(s *Store[*gatewayv1.ReferenceGrant]) *feed[*gatewayv1.ReferenceGrant] {
	return objectFeed("referencegrant", s,
		func() *gatewayv1.ReferenceGrant { return new(gatewayv1.ReferenceGrant) },
		func() client.ObjectList { return new(gatewayv1.ReferenceGrantList) })
}

// namespaceFeed mirrors the labels of Namespaces into s, keyed by {Name: namespace}.
func namespaceFeed(s *Store[map[string]string]) *feed[*corev1.Namespace] {
	return &feed[*corev1.Namespace]{
		kind:      "namespace",
		newObject: func() *corev1.Namespace { return new(corev1.Namespace) },
		newList:   func() client.ObjectList { return new(corev1.NamespaceList) },
		apply: func(ns *corev1.Namespace) error {
			s.set(types.NamespacedName{Name: ns.Name}, ns.Labels)
			return nil
		},
		remove: s.remove,
		batch:  s.batch,
	}
}
