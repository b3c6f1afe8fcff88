package routetable

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	gatewayGroup = gatewayv1.GroupName
	gatewayKind  = "Gateway"
	routeKind    = "HTTPRoute"
)

// compiledListener is a Listener with its allowedRoutes compiled.
type compiledListener struct {
	out  Listener
	host hostPattern
	// namespaces admits a route namespace.
	namespaces func(ns string) bool
	// httpRoutes is false when allowedRoutes.kinds excludes HTTPRoute.
	httpRoutes bool
}

// collectListeners returns the HTTP listeners of Gateways whose class Switchboard serves.
func collectListeners(in Input) []compiledListener {
	classes := map[string]bool{}
	for _, c := range in.Classes {
		if c != nil && c.Spec.ControllerName == ControllerName {
			classes[c.Name] = true
		}
	}
	var out []compiledListener
	for _, gw := range in.Gateways {
		if gw == nil || !classes[string(gw.Spec.GatewayClassName)] {
			continue
		}
		gwName := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		seen := map[gatewayv1.SectionName]bool{}
		for _, l := range gw.Spec.Listeners {
			if l.Protocol != gatewayv1.HTTPProtocolType || seen[l.Name] {
				continue
			}
			seen[l.Name] = true
			var hostname string
			if l.Hostname != nil {
				hostname = string(*l.Hostname)
			}
			host := parseHostPattern(hostname)
			out = append(out, compiledListener{
				out: Listener{
					Gateway:  gwName,
					Name:     l.Name,
					Port:     int32(l.Port),
					Hostname: host.String(),
				},
				host:       host,
				namespaces: allowedNamespaces(gw.Namespace, l.AllowedRoutes, in.NamespaceLabels),
				httpRoutes: allowsHTTPRoutes(l.AllowedRoutes),
			})
		}
	}
	return out
}

// allowedNamespaces compiles allowedRoutes.namespaces: Same (the default), All, Selector
// (an invalid or missing selector, or no NamespaceLabels, admits nothing) or None.
func allowedNamespaces(gwNamespace string, ar *gatewayv1.AllowedRoutes, nsLabels func(string) map[string]string) func(string) bool {
	from := gatewayv1.NamespacesFromSame
	var selector *metav1.LabelSelector
	if ar != nil && ar.Namespaces != nil {
		if ar.Namespaces.From != nil {
			from = *ar.Namespaces.From
		}
		selector = ar.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromSame:
		return func(ns string) bool { return ns == gwNamespace }
	case gatewayv1.NamespacesFromAll:
		return func(string) bool { return true }
	case gatewayv1.NamespacesFromSelector:
		if selector == nil || nsLabels == nil {
			return func(string) bool { return false }
		}
		sel, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			return func(string) bool { return false }
		}
		return func(ns string) bool { return sel.Matches(labels.Set(nsLabels(ns))) }
	default: // None, or a value this version does not know.
		return func(string) bool { return false }
	}
}

// allowsHTTPRoutes reports whether allowedRoutes.kinds admits HTTPRoute; unset or empty
// kinds admit the protocol's route kinds, which for HTTP is HTTPRoute.
func allowsHTTPRoutes(ar *gatewayv1.AllowedRoutes) bool {
	if ar == nil || len(ar.Kinds) == 0 {
		return true
	}
	for _, k := range ar.Kinds {
		group := gatewayGroup
		if k.Group != nil {
			group = string(*k.Group)
		}
		if group == gatewayGroup && k.Kind == routeKind {
			return true
		}
	}
	return false
}

// admits reports whether route attaches to the listener, and if so the route's effective
// hostnames on it: the intersection of the listener hostname and the route hostnames.
func (l *compiledListener) admits(route *gatewayv1.HTTPRoute) ([]hostPattern, bool) {
	if !l.httpRoutes || !l.referencedBy(route) || !l.namespaces(route.Namespace) {
		return nil, false
	}
	if len(route.Spec.Hostnames) == 0 {
		return []hostPattern{l.host}, true
	}
	var hosts []hostPattern
	for _, h := range route.Spec.Hostnames {
		if in, ok := intersect(l.host, parseHostPattern(string(h))); ok {
			hosts = append(hosts, in)
		}
	}
	return hosts, len(hosts) > 0
}

// referencedBy reports whether one of route's parentRefs selects the listener: it names
// the listener's Gateway (group and kind default to gateway.networking.k8s.io/Gateway,
// namespace to the route's) and, when set, the listener's name and port.
func (l *compiledListener) referencedBy(route *gatewayv1.HTTPRoute) bool {
	for _, ref := range route.Spec.ParentRefs {
		if ref.Group != nil && string(*ref.Group) != gatewayGroup {
			continue
		}
		if ref.Kind != nil && string(*ref.Kind) != gatewayKind {
			continue
		}
		ns := route.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if ns != l.out.Gateway.Namespace || string(ref.Name) != l.out.Gateway.Name {
			continue
		}
		if ref.SectionName != nil && *ref.SectionName != l.out.Name {
			continue
		}
		if ref.Port != nil && int32(*ref.Port) != l.out.Port {
			continue
		}
		return true
	}
	return false
}
