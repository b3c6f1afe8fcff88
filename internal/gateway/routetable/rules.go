package routetable

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// compiledRule is a Rule with its matches compiled. A rule with spec matches that all
// failed to compile has no matches and never matches; a rule with no spec matches gets
// the default PathPrefix "/".
type compiledRule struct {
	rule    *Rule
	matches []compiledMatch
}

type compiledMatch struct {
	m     match
	index int
}

// compileRules compiles every rule of route.
func compileRules(route *gatewayv1.HTTPRoute, grants grantIndex) []compiledRule {
	out := make([]compiledRule, 0, len(route.Spec.Rules))
	name := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	for i, r := range route.Spec.Rules {
		rule := &Rule{Route: name, Index: i}
		if r.Name != nil {
			rule.Name = string(*r.Name)
		}
		var invalid []string
		for _, f := range r.Filters {
			if msg := applyFilter(rule, f); msg != "" {
				invalid = append(invalid, msg)
			}
		}
		for bi, b := range r.BackendRefs {
			if len(b.Filters) > 0 {
				invalid = append(invalid, fmt.Sprintf("backendRefs[%d]: per-backend filters are not supported", bi))
			}
			addBackend(rule, route.Namespace, b.BackendRef, grants)
		}
		rule.InvalidFilter = strings.Join(invalid, "; ")

		cr := compiledRule{rule: rule}
		if len(r.Matches) == 0 {
			cr.matches = []compiledMatch{{m: match{kind: pathPrefix, path: "/"}}}
		}
		for mi, hm := range r.Matches {
			if m, ok := compileMatch(hm); ok {
				cr.matches = append(cr.matches, compiledMatch{m: m, index: mi})
			}
		}
		out = append(out, cr)
	}
	return out
}

// applyFilter records a RoutingPolicy ExtensionRef on rule, or describes why the filter
// cannot be honoured.
func applyFilter(rule *Rule, f gatewayv1.HTTPRouteFilter) string {
	if f.Type != gatewayv1.HTTPRouteFilterExtensionRef {
		return fmt.Sprintf("filter type %s is not supported", f.Type)
	}
	ref := f.ExtensionRef
	if ref == nil {
		return "ExtensionRef filter without extensionRef"
	}
	if string(ref.Group) != PolicyGroup || string(ref.Kind) != PolicyKind {
		return fmt.Sprintf("ExtensionRef to %s %q is not supported: only %s/%s",
			groupKind(string(ref.Group), string(ref.Kind)), ref.Name, PolicyGroup, PolicyKind)
	}
	if rule.Policy != nil {
		return fmt.Sprintf("more than one %s ExtensionRef filter", PolicyKind)
	}
	rule.Policy = &types.NamespacedName{Namespace: rule.Route.Namespace, Name: string(ref.Name)}
	return ""
}

// addBackend appends ref to rule.Backends, or to rule.RejectedBackends when the gateway
// cannot send to it.
func addBackend(rule *Rule, routeNamespace string, ref gatewayv1.BackendRef, grants grantIndex) {
	group, kind := "", "Service"
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	target := types.NamespacedName{Namespace: routeNamespace, Name: string(ref.Name)}
	if ref.Namespace != nil {
		target.Namespace = string(*ref.Namespace)
	}
	weight := int32(1)
	if ref.Weight != nil {
		weight = *ref.Weight
	}
	reject := func(reason gatewayv1.RouteConditionReason, format string, args ...any) {
		rule.RejectedBackends = append(rule.RejectedBackends, RejectedBackend{
			Group: group, Kind: kind, Target: target, Weight: weight,
			Reason: reason, Message: fmt.Sprintf(format, args...),
		})
	}
	switch {
	case group != "" || kind != "Service":
		reject(gatewayv1.RouteReasonInvalidKind, "backendRef kind %s is not supported: only core Services", groupKind(group, kind))
	case ref.Port == nil:
		reject(gatewayv1.RouteReasonUnsupportedValue, "backendRef to Service %s has no port", target)
	case target.Namespace != routeNamespace && !grants.permits(routeNamespace, target):
		reject(gatewayv1.RouteReasonRefNotPermitted, "no ReferenceGrant in namespace %s permits HTTPRoutes in %s to reference Service %s",
			target.Namespace, routeNamespace, target.Name)
	default:
		rule.Backends = append(rule.Backends, Backend{Service: target, Port: int32(*ref.Port), Weight: weight})
	}
}

func groupKind(group, kind string) string {
	if group == "" {
		return kind
	}
	return group + "/" + kind
}

// routeEntries returns an entry for every compiled match of every rule, under each of the
// route's effective hostnames on a listener.
func routeEntries(route *gatewayv1.HTTPRoute, rules []compiledRule, hosts []hostPattern) []entry {
	var out []entry
	routeKey := route.Namespace + "/" + route.Name
	for _, host := range hosts {
		for _, cr := range rules {
			for _, cm := range cr.matches {
				out = append(out, entry{
					host: host,
					m:    cm.m,
					rule: cr.rule,
					rank: rank{
						host:       host,
						kind:       cm.m.kind,
						pathLen:    len(cm.m.path),
						method:     cm.m.method != "",
						headers:    len(cm.m.headers),
						query:      len(cm.m.query),
						created:    route.CreationTimestamp.Time,
						route:      routeKey,
						ruleIndex:  cr.rule.Index,
						matchIndex: cm.index,
					},
				})
			}
		}
	}
	return out
}

// grantIndex answers whether a ReferenceGrant lets HTTPRoutes in one namespace reference
// a Service in another.
type grantIndex map[grantKey]bool

type grantKey struct {
	from, to string // namespaces
	service  string // "" for every Service in the namespace
}

func newGrantIndex(grants []*gatewayv1.ReferenceGrant) grantIndex {
	idx := grantIndex{}
	for _, g := range grants {
		if g == nil {
			continue
		}
		for _, from := range g.Spec.From {
			if string(from.Group) != gatewayGroup || string(from.Kind) != routeKind {
				continue
			}
			for _, to := range g.Spec.To {
				if to.Group != "" || to.Kind != "Service" {
					continue
				}
				k := grantKey{from: string(from.Namespace), to: g.Namespace}
				if to.Name != nil {
					k.service = string(*to.Name)
				}
				idx[k] = true
			}
		}
	}
	return idx
}

func (g grantIndex) permits(fromNamespace string, target types.NamespacedName) bool {
	return g[grantKey{from: fromNamespace, to: target.Namespace}] ||
		g[grantKey{from: fromNamespace, to: target.Namespace, service: target.Name}]
}
