package routetable

import (
	"cmp"
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
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

// Input is everything Build reads. Objects are read, never modified, and not retained.
type Input struct {
	// Classes are the GatewayClasses; only those whose controllerName is ControllerName
	// count.
	Classes []*gatewayv1.GatewayClass
	// Gateways are the Gateways; only those whose gatewayClassName names a counted class
	// contribute listeners.
	Gateways []*gatewayv1.Gateway
	// Routes are the HTTPRoutes to attach.
	Routes []*gatewayv1.HTTPRoute
	// ReferenceGrants permit backendRefs into other namespaces. A backendRef to a Service
	// in another namespace without a grant in that namespace is rejected (RefNotPermitted).
	ReferenceGrants []*gatewayv1.ReferenceGrant
	// NamespaceLabels returns the labels of a namespace, for allowedRoutes selectors; nil
	// means selectors match nothing.
	NamespaceLabels func(ns string) map[string]string
}

// Listener is one HTTP listener of a Gateway whose class Switchboard serves.
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
}

// Rule is one spec.rules entry of an attached HTTPRoute: what the gateway does with a
// request that matched it. A Rule and the slices it holds are shared by every caller of
// Match and MUST NOT be modified.
type Rule struct {
	// Route is the HTTPRoute the rule belongs to.
	Route types.NamespacedName
	// Index is the rule's index in the route's spec.rules.
	Index int
	// Name is the rule's optional spec.rules[].name.
	Name string
	// Backends are the rule's backendRefs to core Services, in spec order. A Service
	// reference without a namespace refers to the route's namespace; a missing weight is 1;
	// a weight of 0 means the backend receives no requests.
	Backends []Backend
	// RejectedBackends are the backendRefs the gateway cannot send to (another kind, a
	// missing port, or another namespace without a ReferenceGrant). Per Gateway API, the
	// share of requests their weights would have received MUST be answered with 500; when
	// a rule has no usable Backends, every request MUST be.
	RejectedBackends []RejectedBackend
	// Policy is the RoutingPolicy named by the rule's ExtensionRef filter
	// {group: inference.switchboard.dev, kind: RoutingPolicy}, in the route's namespace;
	// nil when the rule has none and the gateway's default strategy applies.
	Policy *types.NamespacedName
	// InvalidFilter is non-empty when the rule has a filter the gateway cannot honour,
	// and describes it. Gateway API forbids skipping such a filter, so the gateway MUST
	// answer 500 for every request that matches the rule.
	InvalidFilter string
}

// Backend is a backendRef to a core Service.
type Backend struct {
	// Service is the referenced Service.
	Service types.NamespacedName
	// Port is the Service port.
	Port int32
	// Weight is the backend's relative share of requests.
	Weight int32
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
	// Reason is the ResolvedRefs reason: InvalidKind, RefNotPermitted or UnsupportedValue.
	Reason gatewayv1.RouteConditionReason
	// Message says what is wrong, for the condition message.
	Message string
}

// Table is an immutable, compiled route table. It is safe for concurrent use; build a new
// Table to change it. The zero value and a nil *Table match nothing.
type Table struct {
	listeners []Listener
	ports     []int32
	byPort    map[int32]*portRoutes
}

// portRoutes holds every listener on one port, merged by hostname.
type portRoutes struct {
	// groups are ordered most specific listener hostname first; the first group whose
	// hostname matches a request's host is the only one consulted.
	groups []listenerGroup
}

// listenerGroup is the listeners on one port that share a hostname, with the match entries
// of every route rule attached to them in precedence order.
type listenerGroup struct {
	host    hostPattern
	entries []entry
}

// entry is one HTTPRouteMatch of one rule, under one effective hostname.
type entry struct {
	host hostPattern
	m    match
	rule *Rule
	rank rank
}

// Listeners returns the HTTP listeners of Gateways whose class Switchboard serves, ordered
// by port, Gateway and listener name. The slice is a copy.
func (t *Table) Listeners() []Listener {
	if t == nil {
		return nil
	}
	return slices.Clone(t.listeners)
}

// Ports returns the distinct ports of Listeners, ascending. The slice is a copy.
func (t *Table) Ports() []int32 {
	if t == nil {
		return nil
	}
	return slices.Clone(t.ports)
}

// Match returns the rule that serves r arriving on port, by Gateway API precedence, or
// false when no attached rule matches (the gateway answers 404). The host is r.Host without
// its port, compared case-insensitively; the path is r.URL.Path.
func (t *Table) Match(port int32, r *http.Request) (*Rule, bool) {
	if t == nil {
		return nil, false
	}
	pr := t.byPort[port]
	if pr == nil {
		return nil, false
	}
	host := requestHost(r.Host)
	for i := range pr.groups {
		g := &pr.groups[i]
		if !g.host.matches(host) {
			continue
		}
		path := "/"
		if r.URL != nil && r.URL.Path != "" {
			path = r.URL.Path
		}
		for j := range g.entries {
			e := &g.entries[j]
			if e.host.matches(host) && e.m.matches(r, path) {
				return e.rule, true
			}
		}
		return nil, false
	}
	return nil, false
}

// Build compiles in into a Table. It never fails: objects or fields it cannot use are left
// out (a listener of another protocol, a route that attaches nowhere, a match with an
// invalid regular expression) or recorded on the Rule (InvalidFilter, RejectedBackends).
func Build(in Input) *Table {
	listeners := collectListeners(in)
	grants := newGrantIndex(in.ReferenceGrants)

	// entries[i] collects the match entries attached to listeners[i].
	entries := make([][]entry, len(listeners))
	for _, route := range in.Routes {
		if route == nil {
			continue
		}
		var rules []compiledRule // compiled once, shared by every listener the route attaches to
		compiled := false
		for i := range listeners {
			l := &listeners[i]
			hosts, ok := l.admits(route)
			if !ok {
				continue
			}
			if !compiled {
				rules, compiled = compileRules(route, grants), true
			}
			l.out.AttachedRoutes++
			entries[i] = append(entries[i], routeEntries(route, rules, hosts)...)
		}
	}

	t := &Table{byPort: map[int32]*portRoutes{}}
	groupIndex := map[groupKey]int{}
	for i := range listeners {
		l := &listeners[i]
		t.listeners = append(t.listeners, l.out)
		pr := t.byPort[l.out.Port]
		if pr == nil {
			pr = &portRoutes{}
			t.byPort[l.out.Port] = pr
			t.ports = append(t.ports, l.out.Port)
		}
		key := groupKey{port: l.out.Port, host: l.host.String()}
		gi, ok := groupIndex[key]
		if !ok {
			gi = len(pr.groups)
			groupIndex[key] = gi
			pr.groups = append(pr.groups, listenerGroup{host: l.host})
		}
		pr.groups[gi].entries = append(pr.groups[gi].entries, entries[i]...)
	}
	for _, pr := range t.byPort {
		slices.SortStableFunc(pr.groups, func(a, b listenerGroup) int { return a.host.compare(b.host) })
		for gi := range pr.groups {
			g := &pr.groups[gi]
			g.entries = dedupeEntries(g.entries)
			slices.SortStableFunc(g.entries, func(a, b entry) int { return a.rank.compare(b.rank) })
		}
	}
	slices.Sort(t.ports)
	slices.SortStableFunc(t.listeners, func(a, b Listener) int {
		return cmp.Or(
			cmp.Compare(a.Port, b.Port),
			cmp.Compare(a.Gateway.Namespace, b.Gateway.Namespace),
			cmp.Compare(a.Gateway.Name, b.Gateway.Name),
			cmp.Compare(a.Name, b.Name),
		)
	})
	return t
}

type groupKey struct {
	port int32
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
