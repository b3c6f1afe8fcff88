package routetable

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// RouteStatus is what the table made of one HTTPRoute that names one of Switchboard's
// Gateways: the facts a status writer turns into the route's status.parents conditions.
type RouteStatus struct {
	// Route is the HTTPRoute.
	Route types.NamespacedName
	// Parents has one entry per parentRef that names one of Switchboard's Gateways, in
	// spec order.
	Parents []ParentStatus
	// ResolvedRefs is RouteReasonResolvedRefs when every backendRef, mirror and
	// RoutingPolicy reference resolves; otherwise the reason of the first that does not,
	// with ResolvedRefsMessage listing them all.
	ResolvedRefs        gatewayv1.RouteConditionReason
	ResolvedRefsMessage string
	// Rules is the number of spec.rules; InvalidRules of them answer every request with
	// 500 (Rule.InvalidFilter), as InvalidMessage says, and UnsupportedRules of those use
	// a feature the gateway does not implement at all (rather than a reference that does
	// not resolve).
	Rules, InvalidRules, UnsupportedRules int
	InvalidMessage                        string
	// Compiled are the route's compiled rules in spec order, shared with the table; they
	// MUST NOT be modified.
	Compiled []*Rule
}

// ParentStatus is the Accepted condition of one parentRef of a route.
type ParentStatus struct {
	// Ref is the parentRef as written.
	Ref gatewayv1.ParentReference
	// Gateway is the Gateway it names.
	Gateway types.NamespacedName
	// Accepted reports whether the route attaches to a listener of the Gateway through
	// Ref, and Reason and Message say why or why not.
	Accepted bool
	Reason   gatewayv1.RouteConditionReason
	Message  string
}

// Routes returns the status facts of every route that names one of Switchboard's
// Gateways, ordered by namespace and name. The slice is a copy; its entries share their
// Parents with the table and MUST NOT be modified.
func (t *Table) Routes() []RouteStatus {
	if t == nil {
		return nil
	}
	return append([]RouteStatus(nil), t.routes...)
}

// problem is one unresolved reference of a rule.
type problem struct {
	reason  gatewayv1.RouteConditionReason
	message string
}

// summarise fills in the rule-derived facts of st. A route whose every rule uses an
// unsupported feature is not accepted by any parent.
func (st *RouteStatus) summarise(rules []compiledRule) {
	st.ResolvedRefs, st.ResolvedRefsMessage = gatewayv1.RouteReasonResolvedRefs, "All references resolved"
	var problems, invalid []string
	for _, cr := range rules {
		st.Compiled = append(st.Compiled, cr.rule)
		for _, p := range cr.problems {
			if len(problems) == 0 {
				st.ResolvedRefs = p.reason
			}
			problems = append(problems, fmt.Sprintf("rules[%d]: %s", cr.rule.Index, p.message))
		}
		if cr.rule.InvalidFilter != "" {
			st.InvalidRules++
			invalid = append(invalid, fmt.Sprintf("rules[%d]: %s", cr.rule.Index, cr.rule.InvalidFilter))
		}
		if cr.unsupported {
			st.UnsupportedRules++
		}
	}
	if len(problems) > 0 {
		st.ResolvedRefsMessage = joinProblems(problems)
	}
	st.InvalidMessage = joinProblems(invalid)
	if st.Rules > 0 && st.UnsupportedRules == st.Rules {
		for i := range st.Parents {
			if p := &st.Parents[i]; p.Accepted {
				p.Accepted, p.Reason, p.Message = false, gatewayv1.RouteReasonUnsupportedValue, "No rule can be served: "+st.InvalidMessage
			}
		}
	}
}
