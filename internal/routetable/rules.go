package routetable

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/httpfilter"
)

// compiledRule is a Rule with its matches compiled and its status facts. A rule with
// spec matches that all failed to compile has no matches and never matches; a rule with
// no spec matches gets the default PathPrefix "/".
type compiledRule struct {
	rule    *Rule
	matches []compiledMatch
	// problems are the rule's unresolved references, for ResolvedRefs.
	problems []problem
	// unsupported reports whether the rule uses a feature the gateway does not implement.
	unsupported bool
}

type compiledMatch struct {
	m     match
	index int
}

// compileRules compiles every rule of route.
func compileRules(route *gatewayv1.HTTPRoute, refs *resolver) []compiledRule {
	out := make([]compiledRule, 0, len(route.Spec.Rules))
	name := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	for i, r := range route.Spec.Rules {
		cr := compiledRule{rule: &Rule{Route: name, RouteName: name.String(), Index: i}}
		if r.Name != nil {
			cr.rule.Name = string(*r.Name)
		}
		var invalid []string
		fail := func(unsupported bool, format string, args ...any) {
			invalid = append(invalid, fmt.Sprintf(format, args...))
			cr.unsupported = cr.unsupported || unsupported
		}
		chain, problems := httpfilter.Compile(r.Filters)
		problems = append(problems, chain.CheckMatches(r.Matches)...)
		for _, p := range problems {
			fail(true, "%s", p)
		}
		if !chain.Empty() {
			cr.rule.Filters = chain
		}
		for fi, f := range r.Filters {
			switch f.Type {
			case gatewayv1.HTTPRouteFilterExtensionRef:
				cr.extensionRef(fi, f.ExtensionRef, refs, fail)
			case gatewayv1.HTTPRouteFilterRequestMirror:
				cr.mirror(fi, f.RequestMirror, refs, fail)
			}
		}
		for bi, b := range r.BackendRefs {
			filters := backendFilters(bi, b.Filters, fail)
			backend, rejected, ok := refs.backend(route.Namespace, b.BackendRef)
			if !ok {
				cr.rule.RejectedBackends = append(cr.rule.RejectedBackends, rejected)
				cr.problems = append(cr.problems, problem{rejected.Reason, fmt.Sprintf("backendRefs[%d]: %s", bi, rejected.Message)})
				continue
			}
			backend.Filters = filters
			cr.rule.Backends = append(cr.rule.Backends, backend)
		}
		cr.poolPolicy(refs, fail)
		if r.Timeouts != nil {
			cr.rule.RequestTimeout = timeout("timeouts.request", r.Timeouts.Request, fail)
			cr.rule.BackendTimeout = timeout("timeouts.backendRequest", r.Timeouts.BackendRequest, fail)
		}
		cr.rule.InvalidFilter = strings.Join(invalid, "; ")

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

// timeout parses the Gateway API duration d of field (GEP-2257: "500ms", "1h30m"); nil
// and zero mean no timeout.
func timeout(field string, d *gatewayv1.Duration, fail func(bool, string, ...any)) time.Duration {
	if d == nil {
		return 0
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil || v < 0 {
		fail(true, "%s: %q is not a duration", field, *d)
		return 0
	}
	return v
}

// backendFilters compiles the filters of backendRefs[bi], which modify the requests
// the backend receives and their responses: header modifiers and URLRewrite. A redirect,
// mirror or RoutingPolicy belongs to the rule, not to one of its backends.
func backendFilters(bi int, filters []gatewayv1.HTTPRouteFilter, fail func(bool, string, ...any)) *httpfilter.Chain {
	for fi, f := range filters {
		switch f.Type {
		case gatewayv1.HTTPRouteFilterRequestRedirect, gatewayv1.HTTPRouteFilterRequestMirror, gatewayv1.HTTPRouteFilterExtensionRef:
			fail(true, "backendRefs[%d].filters[%d]: a %s filter is not supported on a backendRef, only on its rule", bi, fi, f.Type)
		}
	}
	chain, problems := httpfilter.Compile(filters)
	for _, p := range problems {
		fail(true, "backendRefs[%d]: %s", bi, p)
	}
	if chain.Empty() {
		return nil
	}
	return chain
}

// extensionRef records the RoutingPolicy that filters[fi] applies, or why it cannot be.
func (cr *compiledRule) extensionRef(fi int, ref *gatewayv1.LocalObjectReference, refs *resolver, fail func(bool, string, ...any)) {
	rule := cr.rule
	switch {
	case ref == nil:
		fail(true, "filters[%d]: ExtensionRef filter without extensionRef", fi)
	case string(ref.Group) != PolicyGroup || string(ref.Kind) != PolicyKind:
		msg := fmt.Sprintf("filters[%d]: ExtensionRef to %s %q is not supported: only %s/%s",
			fi, groupKind(string(ref.Group), string(ref.Kind)), ref.Name, PolicyGroup, PolicyKind)
		fail(false, "%s", msg)
		cr.problems = append(cr.problems, problem{gatewayv1.RouteReasonInvalidKind, msg})
	case rule.Policy != nil:
		fail(true, "filters[%d]: more than one %s ExtensionRef filter", fi, PolicyKind)
	default:
		cr.usePolicy(types.NamespacedName{Namespace: rule.Route.Namespace, Name: string(ref.Name)}, "the route", refs, fail)
	}
}

// usePolicy makes the RoutingPolicy key the rule's, referenced by who, and records why
// it cannot be applied, if it cannot.
func (cr *compiledRule) usePolicy(key types.NamespacedName, who string, refs *resolver, fail func(bool, string, ...any)) {
	cr.rule.Policy = &key
	found, invalid := refs.policy(key)
	switch {
	case !found:
		msg := fmt.Sprintf("RoutingPolicy %s referenced by %s does not exist", key, who)
		fail(false, "%s", msg)
		cr.problems = append(cr.problems, problem{RouteReasonRoutingPolicyNotFound, msg})
	case invalid != nil:
		msg := fmt.Sprintf("RoutingPolicy %s is invalid: %v", key, invalid)
		fail(false, "%s", msg)
		cr.problems = append(cr.problems, problem{RouteReasonInvalidRoutingPolicy, msg})
	}
}

// poolPolicy makes the RoutingPolicy of the rule's first InferencePool backend the
// rule's, unless a filter named one: requests to a pool are inference requests.
func (cr *compiledRule) poolPolicy(refs *resolver, fail func(bool, string, ...any)) {
	if cr.rule.Policy != nil {
		return
	}
	for _, b := range cr.rule.Backends {
		if b.Pool != nil {
			cr.usePolicy(b.Pool.Policy, "InferencePool "+b.Pool.Key.String(), refs, fail)
			return
		}
	}
}

// mirror records the backend of the RequestMirror filters[fi], or why it cannot be used.
func (cr *compiledRule) mirror(fi int, f *gatewayv1.HTTPRequestMirrorFilter, refs *resolver, fail func(bool, string, ...any)) {
	if f == nil {
		fail(true, "filters[%d]: RequestMirror filter without requestMirror", fi)
		return
	}
	backend, rejected, ok := refs.backend(cr.rule.Route.Namespace, gatewayv1.BackendRef{BackendObjectReference: f.BackendRef})
	if !ok {
		msg := fmt.Sprintf("filters[%d].requestMirror: %s", fi, rejected.Message)
		fail(false, "%s", msg)
		cr.problems = append(cr.problems, problem{rejected.Reason, msg})
		return
	}
	m := Mirror{Backend: backend, Numerator: 1, Denominator: 1}
	switch {
	case f.Fraction != nil:
		m.Numerator, m.Denominator = f.Fraction.Numerator, 100
		if f.Fraction.Denominator != nil {
			m.Denominator = *f.Fraction.Denominator
		}
	case f.Percent != nil:
		m.Numerator, m.Denominator = *f.Percent, 100
	}
	cr.rule.Mirrors = append(cr.rule.Mirrors, m)
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
