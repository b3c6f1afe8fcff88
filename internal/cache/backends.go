package cache

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// backendSelection is, for one version of the HTTPRoutes and of the Services, the
// Services that some HTTPRoute rule names as a backend, by namespace, one per distinct
// selector: whatever the gateway may route to is a pod one of them selects.
type backendSelection struct {
	routes, services uint64
	// seq numbers the selections computed, from 1.
	seq         uint64
	byNamespace map[string][]Service
}

// backendSelections computes a gateway's backend selection once per version.
type backendSelections struct {
	current atomic.Pointer[backendSelection]
}

// selects reports whether a Service of the selection selects p. It is a superset of the
// pods the gateway routes to: it ignores whether the route is accepted, which parent it
// attaches to and whether a ReferenceGrant permits a backend in another namespace.
func (sel *backendSelection) selects(p *Pod) bool {
	for _, svc := range sel.byNamespace[p.Key.Namespace] {
		if svc.Selects(p) {
			return true
		}
	}
	return false
}

// load returns the selection of the current versions of g's routes and Services.
func (s *backendSelections) load(g *Gateway) *backendSelection {
	routes, services := g.Routes.Version(), g.Services.Version()
	if sel := s.current.Load(); sel != nil && sel.routes == routes && sel.services == services {
		return sel
	}
	sel := &backendSelection{routes: routes, services: services, seq: 1, byNamespace: map[string][]Service{}}
	if prev := s.current.Load(); prev != nil {
		sel.seq = prev.seq + 1
	}
	seen := map[string]bool{} // by namespace and selector
	for _, route := range g.Routes.List() {
		for _, rule := range route.Spec.Rules {
			for _, ref := range rule.BackendRefs {
				svc, ok := g.Services.Get(backendService(route.Namespace, ref.BackendObjectReference))
				if !ok {
					continue
				}
				if id := selectorID(svc); !seen[id] {
					seen[id] = true
					sel.byNamespace[svc.Key.Namespace] = append(sel.byNamespace[svc.Key.Namespace], svc)
				}
			}
		}
	}
	s.current.Store(sel)
	return sel
}

// backendService returns the Service a backendRef of a route in namespace ns names (for
// an InferencePool, the Service equivalent of the pool), or the zero key when it names
// another kind.
func backendService(ns string, ref gatewayv1.BackendObjectReference) types.NamespacedName {
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	key := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
	group, kind := ptr.Deref(ref.Group, ""), ptr.Deref(ref.Kind, "Service")
	switch {
	case group == "" && kind == "Service":
		return key
	case group == routetable.PoolGroup && kind == routetable.PoolKind:
		return routetable.PoolService(key)
	}
	return types.NamespacedName{}
}

// selectorID identifies what svc selects: its namespace, selector and ranks, or, for a
// Service without a selector, the Service itself (its EndpointSlices choose its pods).
func selectorID(svc Service) string {
	if len(svc.Selector) == 0 {
		return "service " + svc.Key.String()
	}
	var b strings.Builder
	b.WriteString(svc.Key.Namespace)
	for _, k := range slices.Sorted(maps.Keys(svc.Selector)) {
		b.WriteString("\x00" + k + "=" + svc.Selector[k])
	}
	for _, port := range svc.Ranks { // a pool's Service selects other endpoints of the pods
		b.WriteString("\x00:" + strconv.Itoa(int(port)))
	}
	return b.String()
}
