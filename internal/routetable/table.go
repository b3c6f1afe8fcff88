package routetable

import (
	"cmp"
	"crypto/tls"
	"net/http"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/httpfilter"
)

// ControllerName is the GatewayClass spec.controllerName Switchboard serves. Gateways of
// any other class are ignored.
const ControllerName = "switchboard.dev/gateway-controller"

// PolicyGroup and PolicyKind identify the ExtensionRef filter that applies a RoutingPolicy
// to a route rule.
const (
	PolicyGroup = "inference.switchboard.dev"
	PolicyKind  = "RoutingPolicy"
)

// HTTPRoute ResolvedRefs reasons of Switchboard's own, for ExtensionRef filters that name
// a RoutingPolicy the gateway cannot apply. The gateway answers 500 on such a rule.
const (
	// RouteReasonRoutingPolicyNotFound means a rule's ExtensionRef names a RoutingPolicy
	// that does not exist in the route's namespace.
	RouteReasonRoutingPolicyNotFound gatewayv1.RouteConditionReason = "RoutingPolicyNotFound"
	// RouteReasonInvalidRoutingPolicy means a rule's ExtensionRef names a RoutingPolicy
	// whose spec the gateway cannot build a router from.
	RouteReasonInvalidRoutingPolicy gatewayv1.RouteConditionReason = "InvalidRoutingPolicy"
)

// Input is everything Build reads. Objects are read, never modified, and not retained.
// The gateway and the status controller build from the same kinds of input, so that the
// status describes exactly what the gateway serves.
type Input struct {
	// Classes are the GatewayClasses; only those whose controllerName is ControllerName
	// count.
	Classes []*gatewayv1.GatewayClass
	// Gateways are the Gateways; only those whose gatewayClassName names a counted class
	// contribute listeners.
	Gateways []*gatewayv1.Gateway
	// Routes are the HTTPRoutes to attach.
	Routes []*gatewayv1.HTTPRoute
	// ReferenceGrants permit backendRefs and listeners' tls.certificateRefs into other
	// namespaces. A backendRef to a Service, or a certificateRef to a Secret, in another
	// namespace without a grant in that namespace is rejected (RefNotPermitted).
	ReferenceGrants []*gatewayv1.ReferenceGrant
	// NamespaceLabels returns the labels of a namespace, for allowedRoutes selectors; nil
	// means selectors match nothing.
	NamespaceLabels func(ns string) map[string]string
	// ServiceExists reports whether a Service exists; a backendRef to a missing Service is
	// rejected (BackendNotFound). Nil means every Service exists.
	ServiceExists func(types.NamespacedName) bool
	// Pool returns an InferencePool; a backendRef to a missing pool is rejected
	// (BackendNotFound). Nil means no pool exists.
	Pool func(types.NamespacedName) (Pool, bool)
	// Policy reports whether a RoutingPolicy exists and, if it does, why the gateway
	// cannot apply it (nil when it can). A rule whose ExtensionRef names a missing or
	// invalid policy answers 500. Nil means every policy exists and is valid.
	Policy func(types.NamespacedName) (found bool, invalid error)
	// Certificate returns what a Secret named by an HTTPS listener's tls.certificateRefs
	// holds (see ParseCertificate), or false when the Secret does not exist. It is asked
	// only for the Secrets CertificateRefs lists. Nil means no Secret exists.
	Certificate func(types.NamespacedName) (Certificate, bool)
}

// Addr is where the gateway serves listeners: a Gateway's IP address and a listener port,
// and whether the listeners there are HTTP or HTTPS (a Gateway's listeners on one port
// share a protocol, or conflict and are not served).
type Addr struct {
	// IP is the Gateway's address, as written in the Gateway ("127.0.0.1", "::1").
	IP string
	// Port is the listener port.
	Port int32
	// TLS is true for HTTPS listeners: the gateway terminates TLS on the address,
	// presenting the certificate Certificates returns for the client's server name.
	TLS bool
}

// Listener is one HTTP or HTTPS listener (tls.mode Terminate) of a Gateway whose class
// Switchboard serves.
type Listener struct {
	// Gateway is the listener's Gateway.
	Gateway types.NamespacedName
	// Name is the listener name, unique within its Gateway.
	Name gatewayv1.SectionName
	// Port is the port the gateway must listen on for this listener.
	Port int32
	// Hostname is the listener hostname, lower-cased, possibly a wildcard
	// ("*.example.com"); empty matches every host.
	Hostname string
	// AttachedRoutes is the number of HTTPRoutes attached to the listener, for the
	// Gateway's status.listeners[].attachedRoutes.
	AttachedRoutes int32
	// Conflicted is the reason of the listener's Conflicted condition, empty when it has
	// none: HostnameConflict (an earlier listener of the Gateway has the same port and
	// hostname) or ProtocolConflict (an earlier listener has the same port and another
	// protocol). A conflicted listener accepts no routes and is not served.
	Conflicted gatewayv1.ListenerConditionReason
	// TLS is how an HTTPS listener terminates TLS; nil for an HTTP listener. It is shared
	// with the table and MUST NOT be modified.
	TLS *ListenerTLS
}

// ListenerTLS is the TLS termination of an HTTPS listener.
type ListenerTLS struct {
	// Certificates are the certificates of the tls.certificateRefs that resolve, in spec
	// order; the gateway presents the first one the client supports. A listener without
	// any accepts routes but is not programmed: no connection for its hostname completes
	// a handshake.
	Certificates []*tls.Certificate
	// Unresolved is the reason of the listener's ResolvedRefs=False condition, empty when
	// every certificateRef resolves: RefNotPermitted (another namespace without a
	// ReferenceGrant) or InvalidCertificateRef (not a core Secret, a missing Secret, or
	// one without a usable certificate), that of the first reference that does not
	// resolve.
	Unresolved gatewayv1.ListenerConditionReason
	// Message lists every reference that does not resolve, and why.
	Message string
}

// Gateway is where one of Switchboard's Gateways is served.
type Gateway struct {
	// Gateway is the Gateway's namespace and name.
	Gateway types.NamespacedName
	// Addresses are the IPs the Gateway is served on: its spec.addresses, or else the
	// first status.addresses entry (allocated by the manager); empty when it has none.
	Addresses []string
	// Rejected is the reason the Gateway's Accepted condition is False because of its
	// addresses, empty when they are acceptable: UnsupportedAddress for an address of a
	// type other than IPAddress. A rejected Gateway is also unserved (Invalid).
	Rejected gatewayv1.GatewayConditionReason
	// Unserved is the reason the Gateway's Programmed condition is False, empty when its
	// listeners are served: AddressNotAssigned (no address yet), AddressNotUsable (an
	// address that is not an IP, or one an older Gateway is already served on at one of
	// the same ports) or Invalid (Rejected).
	Unserved gatewayv1.GatewayConditionReason
	// Message says why, when Unserved is set.
	Message string
}

// Rule is one spec.rules entry of an attached HTTPRoute: what the gateway does with a
// request that matched it. A Rule and the slices it holds are shared by every caller of
// Match and MUST NOT be modified.
type Rule struct {
	// Route is the HTTPRoute the rule belongs to, and RouteName its "namespace/name",
	// as logs and metrics name it.
	Route     types.NamespacedName
	RouteName string
	// Index is the rule's index in the route's spec.rules.
	Index int
	// Name is the rule's optional spec.rules[].name.
	Name string
	// Backends are the rule's usable backendRefs to core Services, in spec order. A
	// Service reference without a namespace refers to the route's namespace; a missing
	// weight is 1; a weight of 0 means the backend receives no requests. Requests are
	// sent only to pods of these Services: an empty list answers every request with 500.
	Backends []Backend
	// RejectedBackends are the backendRefs the gateway cannot send to (another kind, a
	// missing port or Service, or another namespace without a ReferenceGrant). Per Gateway
	// API, the share of requests their weights would have received MUST be answered with
	// 500; when a rule has no usable Backends, every request MUST be.
	RejectedBackends []RejectedBackend
	// Policy is the RoutingPolicy named by the rule's ExtensionRef filter
	// {group: inference.switchboard.dev, kind: RoutingPolicy}, in the route's namespace:
	// the rule does model-aware inference routing. Nil for a plain Gateway API rule.
	Policy *types.NamespacedName
	// Filters are the rule's Gateway API filters other than the RoutingPolicy
	// ExtensionRef and RequestMirror; nil when it has none.
	Filters *httpfilter.Chain
	// Mirrors are the backends of the rule's RequestMirror filters: each request is also
	// sent to one of their pods, and the mirror's response is discarded.
	Mirrors []Mirror
	// InvalidFilter is non-empty when the rule has a filter the gateway cannot honour,
	// and describes it. Gateway API forbids skipping such a filter, so the gateway MUST
	// answer 500 for every request that matches the rule.
	InvalidFilter string
	// RequestTimeout bounds a request from its arrival to the end of its response
	// (timeouts.request), and BackendTimeout each round trip to a backend, from sending
	// the request to the end of the response (timeouts.backendRequest); zero means none.
	// A request that runs out of either is answered 504 if nothing was sent yet.
	RequestTimeout, BackendTimeout time.Duration
}

// Backend is a backendRef to a core Service.
type Backend struct {
	// Service is the referenced Service, or for an InferencePool the key of the pool's
	// pods and port (PoolService).
	Service types.NamespacedName
	// Port is the Service port; for an InferencePool, its first targetPort (Pool.Port).
	Port int32
	// Pool is the referenced InferencePool; nil for a Service.
	Pool *Pool
	// Weight is the backend's relative share of requests.
	Weight int32
	// Filters are the backendRef's own filters, applied after the rule's to the requests
	// it receives and their responses; nil when it has none.
	Filters *httpfilter.Chain
}

// Mirror is the target of a RequestMirror filter: a Service backend and the share of
// requests mirrored to it, Numerator/Denominator (1/1 when the filter gives none).
type Mirror struct {
	Backend
	Numerator, Denominator int32
}

// RejectedBackend is a backendRef the gateway cannot resolve, with the route condition
// reason a status writer should report for it.
type RejectedBackend struct {
	// Group and Kind are the reference's group and kind ("" and "Service" for core
	// Services).
	Group, Kind string
	// Target is the referenced object.
	Target types.NamespacedName
	// Weight is the share of requests that MUST receive 500.
	Weight int32
	// Reason is the ResolvedRefs reason: InvalidKind, RefNotPermitted, BackendNotFound or
	// UnsupportedValue.
	Reason gatewayv1.RouteConditionReason
	// Message says what is wrong, for the condition message.
	Message string
}

// Matched is the outcome of a successful Match.
type Matched struct {
	// Rule is the rule that serves the request.
	Rule *Rule
	// Prefix is the PathPrefix value of the HTTPRouteMatch that selected the rule, for
	// ReplacePrefixMatch rewrites and redirects; empty when the match was not a PathPrefix.
	Prefix string
}

// Table is an immutable, compiled route table. It is safe for concurrent use; build a new
// Table to change it. The zero value and a nil *Table match nothing.
type Table struct {
	listeners []Listener
	gateways  []Gateway
	routes    []RouteStatus
	addrs     []Addr
	byAddr    map[Addr]*addrRoutes
}

// addrRoutes holds every served listener of one Gateway on one port, merged by hostname.
type addrRoutes struct {
	// groups are ordered most specific listener hostname first; the first group whose
	// hostname matches a request's host is the only one consulted.
	groups []listenerGroup
}

// listenerGroup is the listeners on one address that share a hostname, with the match
// entries of every route rule attached to them in precedence order and, on a TLS
// address, their certificates.
type listenerGroup struct {
	host    hostPattern
	entries []entry
	certs   []*tls.Certificate
}

// entry is one HTTPRouteMatch of one rule, under one effective hostname.
type entry struct {
	host hostPattern
	m    match
	rule *Rule
	rank rank
}

// Listeners returns the HTTP and HTTPS listeners of Gateways whose class Switchboard
// serves, ordered by Gateway, port and listener name. The slice is a copy.
func (t *Table) Listeners() []Listener {
	if t == nil {
		return nil
	}
	return slices.Clone(t.listeners)
}

// Gateways returns Switchboard's Gateways and where each is served, ordered by namespace
// and name. The slice is a copy.
func (t *Table) Gateways() []Gateway {
	if t == nil {
		return nil
	}
	return slices.Clone(t.gateways)
}

// Addrs returns the distinct addresses the gateway must listen on, those with at least
// one programmed listener, ordered by IP and port. The slice is a copy.
func (t *Table) Addrs() []Addr {
	if t == nil {
		return nil
	}
	return slices.Clone(t.addrs)
}

// Match returns the rule that serves r arriving on addr, by Gateway API precedence, or
// false when no attached rule matches (the gateway answers 404). The host is r.Host without
// its port, compared case-insensitively; the path is r.URL.Path.
func (t *Table) Match(addr Addr, r *http.Request) (Matched, bool) {
	if t == nil {
		return Matched{}, false
	}
	ar := t.byAddr[addr]
	if ar == nil {
		return Matched{}, false
	}
	host := requestHost(r.Host)
	g := ar.owner(host)
	if g == nil {
		return Matched{}, false
	}
	path := "/"
	if r.URL != nil && r.URL.Path != "" {
		path = r.URL.Path
	}
	for j := range g.entries {
		e := &g.entries[j]
		if e.host.matches(host) && e.m.matches(r, path) {
			m := Matched{Rule: e.rule}
			if e.m.kind == pathPrefix {
				m.Prefix = e.m.path
			}
			return m, true
		}
	}
	return Matched{}, false
}

// Build compiles in into a Table. It never fails: objects or fields it cannot use are left
// out (a listener of another protocol, a route that attaches nowhere, a match with an
// invalid regular expression) or recorded on the Rule (InvalidFilter, RejectedBackends),
// the Listener (Conflicted), the Gateway (Unserved) and the route's RouteStatus.
func Build(in Input) *Table {
	refs := newResolver(in)
	gateways, listeners := collectGateways(in, refs)

	// entries[i] collects the match entries attached to listeners[i].
	entries := make([][]entry, len(listeners))
	t := &Table{byAddr: map[Addr]*addrRoutes{}}
	for _, route := range in.Routes {
		if route == nil {
			continue
		}
		st, attached := attach(route, gateways, listeners)
		if len(st.Parents) == 0 {
			continue // no parentRef names one of Switchboard's Gateways
		}
		rules := compileRules(route, refs)
		st.summarise(rules)
		t.routes = append(t.routes, st)
		for li, hosts := range attached {
			listeners[li].out.AttachedRoutes++
			entries[li] = append(entries[li], routeEntries(route, rules, hosts)...)
		}
	}

	groupIndex := map[groupKey]int{}
	listened := map[Addr]bool{}
	for i := range listeners {
		l := &listeners[i]
		t.listeners = append(t.listeners, l.out)
		if !l.served() {
			continue
		}
		for _, ip := range l.gateway.out.Addresses {
			addr := Addr{IP: ip, Port: l.out.Port, TLS: l.out.TLS != nil}
			ar := t.byAddr[addr]
			if ar == nil {
				ar = &addrRoutes{}
				t.byAddr[addr] = ar
			}
			if l.programmed() && !listened[addr] {
				listened[addr] = true
				t.addrs = append(t.addrs, addr)
			}
			key := groupKey{addr: addr, host: l.host.String()}
			gi, ok := groupIndex[key]
			if !ok {
				gi = len(ar.groups)
				groupIndex[key] = gi
				ar.groups = append(ar.groups, listenerGroup{host: l.host})
			}
			g := &ar.groups[gi]
			g.entries = append(g.entries, entries[i]...)
			if l.out.TLS != nil {
				g.certs = append(g.certs, l.out.TLS.Certificates...)
			}
		}
	}
	for _, ar := range t.byAddr {
		slices.SortStableFunc(ar.groups, func(a, b listenerGroup) int { return a.host.compare(b.host) })
		for gi := range ar.groups {
			g := &ar.groups[gi]
			g.entries = dedupeEntries(g.entries)
			slices.SortStableFunc(g.entries, func(a, b entry) int { return a.rank.compare(b.rank) })
		}
	}
	for _, g := range gateways {
		t.gateways = append(t.gateways, g.out)
	}
	slices.SortFunc(t.gateways, func(a, b Gateway) int { return compareNames(a.Gateway, b.Gateway) })
	slices.SortFunc(t.addrs, func(a, b Addr) int { return cmp.Or(cmp.Compare(a.IP, b.IP), cmp.Compare(a.Port, b.Port)) })
	slices.SortStableFunc(t.listeners, func(a, b Listener) int {
		return cmp.Or(compareNames(a.Gateway, b.Gateway), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(t.routes, func(a, b RouteStatus) int { return compareNames(a.Route, b.Route) })
	return t
}

func compareNames(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

type groupKey struct {
	addr Addr
	host string
}

// dedupeEntries drops entries that repeat a rule's match under the same hostname, which
// happens when a route attaches to several merged listeners.
func dedupeEntries(es []entry) []entry {
	type key struct {
		rule  *Rule
		match int
		host  string
	}
	seen := make(map[key]bool, len(es))
	out := es[:0]
	for _, e := range es {
		k := key{e.rule, e.rank.matchIndex, e.host.String()}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, e)
	}
	return slices.Clip(out)
}
