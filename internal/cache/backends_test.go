package cache

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestBackendSelection checks which pods count as an HTTPRoute's possible backends: those
// a Service named by some rule selects, in the Service's namespace, followed as routes
// and Services change.
func TestBackendSelection(t *testing.T) {
	c := New()
	labelled := func(name, app string) *Pod {
		b := makePod(name)
		b.ep.Labels = map[string]string{"app": app}
		c.UpsertPod(b.Build())
		p, _ := c.Pod(b.ep.Key)
		return p
	}
	llama, mistral, other := labelled("llama-0", "llama"), labelled("mistral-0", "mistral"), labelled("other-0", "other")
	g := &Gateway{Services: new(Store[Service]), Routes: new(Store[*gatewayv1.HTTPRoute])}
	service := func(name, app string) {
		key := types.NamespacedName{Namespace: "ns", Name: name}
		g.Services.set(key, Service{Key: key, Selector: map[string]string{"app": app}})
	}
	route := func(name, ns string, backends ...gatewayv1.BackendObjectReference) {
		r := &gatewayv1.HTTPRoute{}
		r.Namespace, r.Name = ns, name
		rule := gatewayv1.HTTPRouteRule{}
		for _, b := range backends {
			rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: b}})
		}
		r.Spec.Rules = []gatewayv1.HTTPRouteRule{rule}
		g.Routes.set(types.NamespacedName{Namespace: ns, Name: name}, r)
	}
	ref := func(name string) gatewayv1.BackendObjectReference {
		return gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name)}
	}
	check := func(step string, want map[*Pod]bool) {
		t.Helper()
		for p, w := range want {
			if got := g.backends.load(g).selects(p); got != w {
				t.Errorf("%s: selects(%s) = %t, want %t", step, p.Key.Name, got, w)
			}
		}
	}
	service("llama", "llama")
	service("mistral", "mistral")
	service("other", "other")
	check("no route", map[*Pod]bool{llama: false, mistral: false, other: false})

	route("r1", "ns", ref("llama"), ref("missing"))
	check("a route to llama", map[*Pod]bool{llama: true, mistral: false, other: false})

	ns := gatewayv1.Namespace("ns")
	cross := ref("mistral")
	cross.Namespace = &ns
	route("r2", "elsewhere", cross, ref("other")) // "other" in namespace elsewhere: none
	check("a route from another namespace", map[*Pod]bool{llama: true, mistral: true, other: false})

	kind := gatewayv1.Kind("InferencePool")
	pool := ref("other")
	pool.Kind = &kind
	route("r3", "ns", pool)
	check("a backend of another kind", map[*Pod]bool{other: false})

	service("llama", "mistral") // the llama Service now selects the mistral pods
	check("a Service's selector changed", map[*Pod]bool{llama: false, mistral: true})
}
