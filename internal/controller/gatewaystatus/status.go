package gatewaystatus

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/controller/policystatus"
	"github.com/switchboard-llm/switchboard/internal/gateway/routetable"
)

// HTTPRoute ResolvedRefs reasons of Switchboard's own, for ExtensionRef filters that name
// a RoutingPolicy the gateway cannot apply. The gateway answers 500 on such a rule.
const (
	// RouteReasonRoutingPolicyNotFound means a rule's ExtensionRef names a RoutingPolicy
	// that does not exist in the route's namespace.
	RouteReasonRoutingPolicyNotFound gatewayv1.RouteConditionReason = "RoutingPolicyNotFound"
	// RouteReasonInvalidRoutingPolicy means a rule's ExtensionRef names a RoutingPolicy
	// whose spec the gateway cannot build a router from (see policystatus.Validate).
	RouteReasonInvalidRoutingPolicy gatewayv1.RouteConditionReason = "InvalidRoutingPolicy"
)

// maxMessage bounds condition messages that list problems.
const maxMessage = 1024

var (
	gatewayGroup   = gatewayv1.Group(gatewayv1.GroupName)
	httpRouteKinds = []gatewayv1.RouteGroupKind{{Group: &gatewayGroup, Kind: "HTTPRoute"}}
)

// setCondition sets a condition of the given type on conds.
func setCondition[R ~string](conds *[]metav1.Condition, typ string, ok bool, reason R, message string, generation int64) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: string(reason), Message: message, ObservedGeneration: generation,
	})
}

// classStatus returns the status of one of Switchboard's GatewayClasses.
func classStatus(gc *gatewayv1.GatewayClass) gatewayv1.GatewayClassStatus {
	st := *gc.Status.DeepCopy()
	setCondition(&st.Conditions, string(gatewayv1.GatewayClassConditionStatusAccepted), true,
		gatewayv1.GatewayClassReasonAccepted, "Switchboard serves this class", gc.Generation)
	return st
}

// gatewayStatus returns the status of one of Switchboard's Gateways, with the listener
// attachment counts of table. The gateway serves HTTP listeners only; others are not
// accepted. Spec addresses are not interpreted.
func gatewayStatus(gw *gatewayv1.Gateway, table *routetable.Table) gatewayv1.GatewayStatus {
	st := *gw.Status.DeepCopy()
	gen := gw.Generation
	attached := map[gatewayv1.SectionName]int32{}
	for _, l := range table.Listeners() {
		if l.Gateway.Namespace == gw.Namespace && l.Gateway.Name == gw.Name {
			attached[l.Name] = l.AttachedRoutes
		}
	}
	previous := map[gatewayv1.SectionName][]metav1.Condition{}
	for _, ls := range st.Listeners {
		previous[ls.Name] = ls.Conditions
	}
	st.Listeners = make([]gatewayv1.ListenerStatus, 0, len(gw.Spec.Listeners))
	var invalid []string
	for _, l := range gw.Spec.Listeners {
		ls := gatewayv1.ListenerStatus{Name: l.Name, Conditions: previous[l.Name], SupportedKinds: []gatewayv1.RouteGroupKind{}}
		if l.Protocol != gatewayv1.HTTPProtocolType {
			invalid = append(invalid, string(l.Name))
			msg := fmt.Sprintf("Protocol %s is not supported: only HTTP", l.Protocol)
			setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionAccepted), false, gatewayv1.ListenerReasonUnsupportedProtocol, msg, gen)
			setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionProgrammed), false, gatewayv1.ListenerReasonInvalid, msg, gen)
			setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionResolvedRefs), true, gatewayv1.ListenerReasonResolvedRefs, "No references", gen)
		} else {
			kinds, unsupported := supportedKinds(l.AllowedRoutes)
			ls.SupportedKinds = kinds
			ls.AttachedRoutes = attached[l.Name]
			setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionAccepted), true, gatewayv1.ListenerReasonAccepted, "Listener accepted", gen)
			setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionProgrammed), true, gatewayv1.ListenerReasonProgrammed, "Served by the Switchboard gateway", gen)
			if len(unsupported) > 0 {
				setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionResolvedRefs), false, gatewayv1.ListenerReasonInvalidRouteKinds,
					"Route kinds not supported: "+strings.Join(unsupported, ", ")+"; only HTTPRoute", gen)
			} else {
				setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionResolvedRefs), true, gatewayv1.ListenerReasonResolvedRefs, "All references resolved", gen)
			}
		}
		st.Listeners = append(st.Listeners, ls)
	}

	valid := len(gw.Spec.Listeners) - len(invalid)
	switch {
	case len(invalid) == 0:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionAccepted), true, gatewayv1.GatewayReasonAccepted, "Gateway accepted", gen)
	default:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionAccepted), valid > 0, gatewayv1.GatewayReasonListenersNotValid,
			"Listeners not valid: "+strings.Join(invalid, ", "), gen)
	}
	if valid > 0 {
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionProgrammed), true, gatewayv1.GatewayReasonProgrammed, "Served by the Switchboard gateway", gen)
	} else {
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionProgrammed), false, gatewayv1.GatewayReasonInvalid, "No valid listener", gen)
	}
	return st
}

// supportedKinds returns the route kinds of allowedRoutes the gateway serves (HTTPRoute;
// unset kinds mean HTTPRoute) and the names of the others.
func supportedKinds(ar *gatewayv1.AllowedRoutes) ([]gatewayv1.RouteGroupKind, []string) {
	if ar == nil || len(ar.Kinds) == 0 {
		return httpRouteKinds, nil
	}
	kinds := []gatewayv1.RouteGroupKind{}
	var unsupported []string
	for _, k := range ar.Kinds {
		group := gatewayGroup
		if k.Group != nil {
			group = *k.Group
		}
		if group == gatewayGroup && k.Kind == "HTTPRoute" {
			kinds = append(kinds, gatewayv1.RouteGroupKind{Group: &gatewayGroup, Kind: k.Kind})
			continue
		}
		unsupported = append(unsupported, string(group)+"/"+string(k.Kind))
	}
	return kinds, unsupported
}

// routeParents returns route's status.parents: the entries of other controllers
// unchanged, then one Switchboard entry for each parentRef naming a Switchboard Gateway.
func routeParents(ctx context.Context, route *gatewayv1.HTTPRoute, w *world) ([]gatewayv1.RouteParentStatus, error) {
	out := []gatewayv1.RouteParentStatus{}
	var ours []gatewayv1.RouteParentStatus
	for _, p := range route.Status.Parents {
		if p.ControllerName == routetable.ControllerName {
			ours = append(ours, p)
		} else {
			out = append(out, p)
		}
	}
	var refs *resolution
	for _, ref := range route.Spec.ParentRefs {
		if (ref.Group != nil && *ref.Group != gatewayGroup) || (ref.Kind != nil && *ref.Kind != "Gateway") {
			continue
		}
		key := types.NamespacedName{Namespace: route.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil {
			key.Namespace = string(*ref.Namespace)
		}
		gw, ok := w.gateway(key)
		if !ok {
			continue // a missing Gateway, or another controller's
		}
		if refs == nil {
			r, err := resolve(ctx, w.reader, route)
			if err != nil {
				return nil, err
			}
			refs = &r
		}
		entry := gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: routetable.ControllerName}
		for _, p := range ours {
			if equality.Semantic.DeepEqual(p.ParentRef, ref) {
				// SetStatusCondition modifies in place; route.Status must stay as read.
				entry.Conditions = slices.Clone(p.Conditions)
			}
		}
		gen := route.Generation
		ok, reason, msg := accepted(route, ref, gw, w.classes)
		if ok && len(route.Spec.Rules) > 0 && refs.invalidRules == len(route.Spec.Rules) {
			ok, reason, msg = false, gatewayv1.RouteReasonUnsupportedValue, "No rule can be served: "+refs.invalidMessage
		}
		setCondition(&entry.Conditions, string(gatewayv1.RouteConditionAccepted), ok, reason, msg, gen)
		setCondition(&entry.Conditions, string(gatewayv1.RouteConditionResolvedRefs), refs.reason == gatewayv1.RouteReasonResolvedRefs,
			refs.reason, refs.message, gen)
		if refs.invalidRules > 0 && refs.invalidRules < len(route.Spec.Rules) {
			setCondition(&entry.Conditions, string(gatewayv1.RouteConditionPartiallyInvalid), true, gatewayv1.RouteReasonUnsupportedValue,
				"Rules answered with 500: "+refs.invalidMessage, gen)
		} else {
			meta.RemoveStatusCondition(&entry.Conditions, string(gatewayv1.RouteConditionPartiallyInvalid))
		}
		out = append(out, entry)
	}
	return out, nil
}

// accepted reports whether route, through parentRef ref, attaches to a listener of gw,
// by the route table's rules; if not, it gives the Accepted reason and message.
func accepted(route *gatewayv1.HTTPRoute, ref gatewayv1.ParentReference, gw *gatewayv1.Gateway,
	classes []*gatewayv1.GatewayClass) (bool, gatewayv1.RouteConditionReason, string) {
	one := *route
	one.Spec.ParentRefs = []gatewayv1.ParentReference{ref}
	in := routetable.Input{Classes: classes, Gateways: []*gatewayv1.Gateway{gw}}
	attaches := func(r *gatewayv1.HTTPRoute) (bool, []routetable.Listener) {
		in.Routes = []*gatewayv1.HTTPRoute{r}
		ls := routetable.Build(in).Listeners()
		for _, l := range ls {
			if l.AttachedRoutes > 0 {
				return true, ls
			}
		}
		return false, ls
	}
	ok, listeners := attaches(&one)
	if ok {
		return true, gatewayv1.RouteReasonAccepted, "Route attached to the Gateway"
	}
	matching := 0
	for _, l := range listeners {
		if (ref.SectionName == nil || *ref.SectionName == l.Name) && (ref.Port == nil || int32(*ref.Port) == l.Port) {
			matching++
		}
	}
	if matching == 0 {
		return false, gatewayv1.RouteReasonNoMatchingParent, "No HTTP listener of the Gateway matches the parentRef's sectionName and port"
	}
	anyHost := one
	anyHost.Spec.Hostnames = nil
	if ok, _ := attaches(&anyHost); ok {
		return false, gatewayv1.RouteReasonNoMatchingListenerHostname, "No hostname of the route matches a listener hostname"
	}
	return false, gatewayv1.RouteReasonNotAllowedByListeners, "The listeners' allowedRoutes do not admit the route"
}

// resolution is the outcome of resolving a route's references.
type resolution struct {
	// reason and message are the ResolvedRefs condition's: RouteReasonResolvedRefs, or
	// the reason of the first unresolved reference and a message listing all.
	reason  gatewayv1.RouteConditionReason
	message string
	// invalidRules is the number of rules with filters the gateway cannot honour, and
	// invalidMessage says why.
	invalidRules   int
	invalidMessage string
}

// resolve resolves the ExtensionRef filters and backendRefs of route's rules, as the
// gateway does: RoutingPolicies and Services in the route's namespace, no ReferenceGrants.
func resolve(ctx context.Context, reader client.Reader, route *gatewayv1.HTTPRoute) (resolution, error) {
	res := resolution{reason: gatewayv1.RouteReasonResolvedRefs}
	var problems, invalid []string
	problem := func(reason gatewayv1.RouteConditionReason, format string, args ...any) {
		if len(problems) == 0 {
			res.reason = reason
		}
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	ns := route.Namespace
	for i, rule := range route.Spec.Rules {
		var why []string
		policies := 0
		for _, f := range rule.Filters {
			switch {
			case f.Type != gatewayv1.HTTPRouteFilterExtensionRef:
				why = append(why, fmt.Sprintf("filter type %s is not supported", f.Type))
			case f.ExtensionRef == nil:
				why = append(why, "ExtensionRef filter without extensionRef")
			case string(f.ExtensionRef.Group) != routetable.PolicyGroup || string(f.ExtensionRef.Kind) != routetable.PolicyKind:
				problem(gatewayv1.RouteReasonInvalidKind, "rules[%d]: ExtensionRef to %s/%s %q is not supported: only %s/%s",
					i, f.ExtensionRef.Group, f.ExtensionRef.Kind, f.ExtensionRef.Name, routetable.PolicyGroup, routetable.PolicyKind)
			default:
				policies++
				if policies > 1 {
					why = append(why, "more than one RoutingPolicy ExtensionRef filter")
					continue
				}
				key := types.NamespacedName{Namespace: ns, Name: string(f.ExtensionRef.Name)}
				var rp v1alpha1.RoutingPolicy
				if err := reader.Get(ctx, key, &rp); err != nil {
					if !apierrors.IsNotFound(err) {
						return res, fmt.Errorf("get routingpolicy %s: %w", key, err)
					}
					problem(RouteReasonRoutingPolicyNotFound, "rules[%d]: RoutingPolicy %s not found", i, key)
					continue
				}
				if err := policystatus.Validate(&rp.Spec); err != nil {
					problem(RouteReasonInvalidRoutingPolicy, "rules[%d]: RoutingPolicy %s is invalid: %v", i, key, err)
				}
			}
		}
		for bi, b := range rule.BackendRefs {
			if len(b.Filters) > 0 {
				why = append(why, fmt.Sprintf("backendRefs[%d]: per-backend filters are not supported", bi))
			}
			ref := b.BackendRef
			target := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
			if ref.Namespace != nil {
				target.Namespace = string(*ref.Namespace)
			}
			switch {
			case (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != "Service"):
				problem(gatewayv1.RouteReasonInvalidKind, "rules[%d].backendRefs[%d]: kind %s/%s is not supported: only core Services",
					i, bi, deref(ref.Group), deref(ref.Kind))
			case ref.Port == nil:
				problem(gatewayv1.RouteReasonUnsupportedValue, "rules[%d].backendRefs[%d]: Service %s has no port", i, bi, target)
			case target.Namespace != ns:
				problem(gatewayv1.RouteReasonRefNotPermitted, "rules[%d].backendRefs[%d]: Service %s is in another namespace; ReferenceGrants are not supported",
					i, bi, target)
			default:
				var svc corev1.Service
				if err := reader.Get(ctx, target, &svc); err != nil {
					if !apierrors.IsNotFound(err) {
						return res, fmt.Errorf("get service %s: %w", target, err)
					}
					problem(gatewayv1.RouteReasonBackendNotFound, "rules[%d].backendRefs[%d]: Service %s not found", i, bi, target)
				}
			}
		}
		if len(why) > 0 {
			res.invalidRules++
			invalid = append(invalid, fmt.Sprintf("rules[%d]: %s", i, strings.Join(why, ", ")))
		}
	}
	res.message = "All references resolved"
	if len(problems) > 0 {
		res.message = truncate(strings.Join(problems, "; "))
	}
	res.invalidMessage = truncate(strings.Join(invalid, "; "))
	return res, nil
}

// truncate bounds s to maxMessage bytes.
func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// deref returns *p, or "" when p is nil.
func deref[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}
