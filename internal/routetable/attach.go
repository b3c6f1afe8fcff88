package routetable

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

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

// compiledGateway is one of Switchboard's Gateways with where it is served.
type compiledGateway struct {
	out Gateway
	gw  *gatewayv1.Gateway
}

// compiledListener is a Listener with its allowedRoutes compiled.
type compiledListener struct {
	out     Listener
	gateway *compiledGateway
	host    hostPattern
	// namespaces admits a route namespace.
	namespaces func(ns string) bool
	// httpRoutes is false when allowedRoutes.kinds excludes HTTPRoute.
	httpRoutes bool
}

// served reports whether the gateway serves the listener's hostname on its address: its
// Gateway has a usable address and the listener does not conflict with another.
func (l *compiledListener) served() bool {
	return l.gateway.out.Unserved == "" && l.out.Conflicted == ""
}

// programmed reports whether the listener is served and can complete connections: an
// HTTPS listener also needs a usable certificate. A served listener that is not
// programmed still owns its hostname on the address, so that its requests are never
// answered by a sibling listener.
func (l *compiledListener) programmed() bool {
	return l.served() && (l.out.TLS == nil || len(l.out.TLS.Certificates) > 0)
}

// collectGateways returns Switchboard's Gateways, oldest first, with the addresses they
// are served on, and their HTTP and HTTPS listeners, whose certificateRefs refs resolves.
func collectGateways(in Input, refs *resolver) ([]*compiledGateway, []compiledListener) {
	classes := map[string]bool{}
	for _, c := range in.Classes {
		if c != nil && c.Spec.ControllerName == ControllerName {
			classes[c.Name] = true
		}
	}
	var gateways []*compiledGateway
	for _, gw := range in.Gateways {
		if gw != nil && classes[string(gw.Spec.GatewayClassName)] {
			gateways = append(gateways, &compiledGateway{gw: gw, out: Gateway{Gateway: types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}}})
		}
	}
	// The oldest Gateway keeps an address:port that several claim.
	slices.SortFunc(gateways, func(a, b *compiledGateway) int {
		if c := a.gw.CreationTimestamp.Compare(b.gw.CreationTimestamp.Time); c != 0 {
			return c
		}
		return compareNames(a.out.Gateway, b.out.Gateway)
	})
	taken := map[Addr]types.NamespacedName{}
	var out []compiledListener
	for _, g := range gateways {
		g.assignAddress()
		listeners := compileListeners(g, in.NamespaceLabels, refs)
		if g.out.Unserved == "" {
			g.claim(listeners, taken)
		}
		out = append(out, listeners...)
	}
	return gateways, out
}

// assignAddress sets the Gateway's addresses from spec.addresses, or else from the first
// IP of status.addresses.
func (g *compiledGateway) assignAddress() {
	if len(g.gw.Spec.Addresses) > 0 {
		for i, a := range g.gw.Spec.Addresses {
			if a.Type != nil && *a.Type != gatewayv1.IPAddressType {
				g.out.Addresses = nil
				g.out.Rejected, g.out.Unserved = gatewayv1.GatewayReasonUnsupportedAddress, gatewayv1.GatewayReasonInvalid
				g.out.Message = fmt.Sprintf("spec.addresses[%d]: address type %s is not supported: only IPAddress", i, *a.Type)
				return
			}
			ip, err := netip.ParseAddr(a.Value)
			if err != nil {
				g.out.Addresses = nil
				g.out.Unserved = gatewayv1.GatewayReasonAddressNotUsable
				g.out.Message = fmt.Sprintf("spec.addresses[%d]: %q is not an IP address", i, a.Value)
				return
			}
			if !slices.Contains(g.out.Addresses, ip.String()) {
				g.out.Addresses = append(g.out.Addresses, ip.String())
			}
		}
		return
	}
	for _, a := range g.gw.Status.Addresses {
		if a.Type != nil && *a.Type != gatewayv1.IPAddressType {
			continue
		}
		if ip, err := netip.ParseAddr(a.Value); err == nil {
			g.out.Addresses = []string{ip.String()}
			return
		}
	}
	g.out.Unserved = gatewayv1.GatewayReasonAddressNotAssigned
	g.out.Message = "No address is assigned to the Gateway yet"
}

// claim records the Gateway's served address:ports in taken, or marks the Gateway unserved
// when an older Gateway holds one of them. An unspecified address (0.0.0.0, ::) claims the
// port on every address.
func (g *compiledGateway) claim(listeners []compiledListener, taken map[Addr]types.NamespacedName) {
	var mine []Addr
	for _, l := range listeners {
		if l.out.Conflicted != "" {
			continue
		}
		for _, ip := range g.out.Addresses {
			a := Addr{IP: ip, Port: l.out.Port}
			for other, owner := range taken {
				if other.Port == a.Port && (other.IP == a.IP || unspecified(other.IP) || unspecified(a.IP)) {
					g.out.Unserved = gatewayv1.GatewayReasonAddressNotUsable
					g.out.Message = fmt.Sprintf("Address %s port %d is already served for Gateway %s", ip, a.Port, owner)
					return
				}
			}
			mine = append(mine, a)
		}
	}
	for _, a := range mine {
		taken[a] = g.out.Gateway
	}
}

func unspecified(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.IsUnspecified()
}

// compileListeners returns the HTTP listeners of g and its HTTPS listeners that
// terminate TLS, with their certificates resolved by refs, marking every listener that
// cannot be told apart from another of g: the same port with another protocol
// (ProtocolConflict), or the same port and hostname (HostnameConflict). Gateway API
// forbids picking a winner among them, so none of them is served.
func compileListeners(g *compiledGateway, nsLabels func(string) map[string]string, refs *resolver) []compiledListener {
	gw := g.gw
	type portHost struct {
		port gatewayv1.PortNumber
		host string
	}
	protocols := map[gatewayv1.PortNumber]map[gatewayv1.ProtocolType]bool{}
	hosts := map[portHost]int{}
	seen := map[gatewayv1.SectionName]bool{}
	var listeners []gatewayv1.Listener
	for _, l := range gw.Spec.Listeners {
		if seen[l.Name] {
			continue
		}
		seen[l.Name] = true
		listeners = append(listeners, l)
		if protocols[l.Port] == nil {
			protocols[l.Port] = map[gatewayv1.ProtocolType]bool{}
		}
		protocols[l.Port][l.Protocol] = true
		hosts[portHost{l.Port, listenerHost(l).String()}]++
	}
	var out []compiledListener
	for _, l := range listeners {
		if !servable(l) {
			continue
		}
		host := listenerHost(l)
		var conflict gatewayv1.ListenerConditionReason
		switch {
		case len(protocols[l.Port]) > 1:
			conflict = gatewayv1.ListenerReasonProtocolConflict
		case hosts[portHost{l.Port, host.String()}] > 1:
			conflict = gatewayv1.ListenerReasonHostnameConflict
		}
		out = append(out, compiledListener{
			out: Listener{
				Gateway:    g.out.Gateway,
				Name:       l.Name,
				Port:       int32(l.Port),
				Hostname:   host.String(),
				Conflicted: conflict,
				TLS:        listenerTLS(gw.Namespace, l, refs),
			},
			gateway:    g,
			host:       host,
			namespaces: allowedNamespaces(gw.Namespace, l.AllowedRoutes, nsLabels),
			httpRoutes: allowsHTTPRoutes(l.AllowedRoutes),
		})
	}
	return out
}

// servable reports whether the gateway can serve a listener of l's protocol: HTTP, or
// HTTPS terminating TLS (tls.mode Terminate, the default; Passthrough is TLSRoute's).
func servable(l gatewayv1.Listener) bool {
	switch l.Protocol {
	case gatewayv1.HTTPProtocolType:
		return true
	case gatewayv1.HTTPSProtocolType:
		return l.TLS == nil || l.TLS.Mode == nil || *l.TLS.Mode == gatewayv1.TLSModeTerminate
	}
	return false
}

// listenerTLS resolves the TLS termination of l, a listener of a Gateway in gwNamespace:
// nil for an HTTP listener.
func listenerTLS(gwNamespace string, l gatewayv1.Listener, refs *resolver) *ListenerTLS {
	if l.Protocol != gatewayv1.HTTPSProtocolType {
		return nil
	}
	var certRefs []gatewayv1.SecretObjectReference
	if l.TLS != nil {
		certRefs = l.TLS.CertificateRefs
	}
	certs, problems := refs.certificates(gwNamespace, certRefs)
	out := &ListenerTLS{Certificates: certs}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.message
		}
		out.Unresolved, out.Message = problems[0].reason, joinProblems(msgs)
	}
	return out
}

// listenerHost returns the compiled hostname of l.
func listenerHost(l gatewayv1.Listener) hostPattern {
	if l.Hostname == nil {
		return parseHostPattern("")
	}
	return parseHostPattern(string(*l.Hostname))
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
// kinds admit the protocol's route kinds, which for HTTP and HTTPS is HTTPRoute.
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

// attach resolves route's parentRefs against Switchboard's Gateways: one ParentStatus per
// parentRef naming one of them, and for every listener the route attaches to (by index in
// listeners), the route's effective hostnames on it.
func attach(route *gatewayv1.HTTPRoute, gateways []*compiledGateway, listeners []compiledListener) (RouteStatus, map[int][]hostPattern) {
	st := RouteStatus{Route: types.NamespacedName{Namespace: route.Namespace, Name: route.Name}, Rules: len(route.Spec.Rules)}
	attached := map[int][]hostPattern{}
	for _, ref := range route.Spec.ParentRefs {
		if ref.Group != nil && string(*ref.Group) != gatewayGroup || ref.Kind != nil && string(*ref.Kind) != gatewayKind {
			continue
		}
		key := types.NamespacedName{Namespace: route.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil {
			key.Namespace = string(*ref.Namespace)
		}
		if !slices.ContainsFunc(gateways, func(g *compiledGateway) bool { return g.out.Gateway == key }) {
			continue // a missing Gateway, or another controller's
		}
		ps := ParentStatus{Ref: ref, Gateway: key}
		selected, allowed := 0, 0
		for i := range listeners {
			l := &listeners[i]
			if l.out.Gateway != key || ref.SectionName != nil && *ref.SectionName != l.out.Name ||
				ref.Port != nil && int32(*ref.Port) != l.out.Port {
				continue
			}
			selected++
			if l.out.Conflicted != "" || !l.httpRoutes || !l.namespaces(route.Namespace) {
				continue
			}
			allowed++
			if hosts, ok := l.hostnames(route); ok {
				ps.Accepted = true
				if _, dup := attached[i]; !dup {
					attached[i] = hosts
				}
			}
		}
		switch {
		case ps.Accepted:
			ps.Reason, ps.Message = gatewayv1.RouteReasonAccepted, "Route attached to the Gateway"
		case selected == 0:
			ps.Reason, ps.Message = gatewayv1.RouteReasonNoMatchingParent, "No HTTP or HTTPS listener of the Gateway matches the parentRef's sectionName and port"
		case allowed > 0:
			ps.Reason, ps.Message = gatewayv1.RouteReasonNoMatchingListenerHostname, "No hostname of the route matches a listener hostname"
		default:
			ps.Reason, ps.Message = gatewayv1.RouteReasonNotAllowedByListeners, "The listeners' allowedRoutes do not admit the route"
		}
		st.Parents = append(st.Parents, ps)
	}
	return st, attached
}

// hostnames returns route's effective hostnames on the listener: the intersection of the
// listener hostname and the route hostnames, or false when they do not intersect.
func (l *compiledListener) hostnames(route *gatewayv1.HTTPRoute) ([]hostPattern, bool) {
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

// joinProblems joins condition messages, bounded to maxMessage bytes.
func joinProblems(msgs []string) string {
	s := strings.Join(msgs, "; ")
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// maxMessage bounds condition messages that list problems.
const maxMessage = 1024
