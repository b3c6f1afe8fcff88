package gatewaystatus

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/bindreport"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

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
	st.SupportedFeatures = supportedFeatures()
	return st
}

// gatewayStatus returns the status of one of Switchboard's Gateways from where the route
// table serves it (served), the table's listeners and the addresses and ports gateway
// replicas report they cannot bind (unbound). unassigned, when not empty, replaces the
// table's message for a Gateway without an address. The gateway serves HTTP listeners
// and HTTPS listeners that terminate TLS; others are not accepted. An HTTPS listener
// without a usable certificate is accepted, and routes attach to it, but it is not
// programmed; so is a listener whose port a replica cannot bind on one of the Gateway's
// addresses, and the Gateway is then not programmed either (AddressNotUsable).
func gatewayStatus(gw *gatewayv1.Gateway, served routetable.Gateway, listeners []routetable.Listener, unbound map[bindreport.Addr]string,
	unassigned string) gatewayv1.GatewayStatus {
	st := *gw.Status.DeepCopy()
	gen := gw.Generation
	unusable := unboundOf(served, listeners, unbound)
	st.Addresses = nil
	for _, ip := range served.Addresses {
		if !slices.ContainsFunc(unusable, func(f bindreport.Failure) bool { return f.IP == ip }) {
			st.Addresses = append(st.Addresses, gatewayv1.GatewayStatusAddress{Type: ptr.To(gatewayv1.IPAddressType), Value: ip})
		}
	}
	unservedMessage := served.Message
	if served.Unserved == gatewayv1.GatewayReasonAddressNotAssigned && unassigned != "" {
		unservedMessage = unassigned
	}

	compiled := map[gatewayv1.SectionName]routetable.Listener{}
	for _, l := range listeners {
		if l.Gateway == served.Gateway {
			compiled[l.Name] = l
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
		set := func(typ gatewayv1.ListenerConditionType, ok bool, reason gatewayv1.ListenerConditionReason, msg string) {
			setCondition(&ls.Conditions, string(typ), ok, reason, msg, gen)
		}
		cl, servable := compiled[l.Name]
		switch {
		case !servable:
			invalid = append(invalid, fmt.Sprintf("%s (%s)", l.Name, gatewayv1.ListenerReasonUnsupportedProtocol))
			msg := unsupportedMessage(l)
			set(gatewayv1.ListenerConditionAccepted, false, gatewayv1.ListenerReasonUnsupportedProtocol, msg)
			set(gatewayv1.ListenerConditionProgrammed, false, gatewayv1.ListenerReasonInvalid, msg)
			set(gatewayv1.ListenerConditionResolvedRefs, true, gatewayv1.ListenerReasonResolvedRefs, "No references")
			// Never served, so in no conflict: the condition would say nothing.
			meta.RemoveStatusCondition(&ls.Conditions, string(gatewayv1.ListenerConditionConflicted))
		case cl.Conflicted != "":
			invalid = append(invalid, fmt.Sprintf("%s (%s)", l.Name, cl.Conflicted))
			msg := conflictMessage(cl)
			set(gatewayv1.ListenerConditionConflicted, true, cl.Conflicted, msg)
			set(gatewayv1.ListenerConditionAccepted, false, cl.Conflicted, msg)
			set(gatewayv1.ListenerConditionProgrammed, false, gatewayv1.ListenerReasonInvalid, msg)
			setResolvedRefs(&ls, l.AllowedRoutes, cl.TLS, gen)
		default:
			ls.AttachedRoutes = cl.AttachedRoutes
			set(gatewayv1.ListenerConditionConflicted, false, gatewayv1.ListenerReasonNoConflicts, "No conflicting listener")
			set(gatewayv1.ListenerConditionAccepted, true, gatewayv1.ListenerReasonAccepted, "Listener accepted")
			switch {
			case cl.TLS != nil && len(cl.TLS.Certificates) == 0:
				invalid = append(invalid, fmt.Sprintf("%s (%s)", l.Name, cl.TLS.Unresolved))
				set(gatewayv1.ListenerConditionProgrammed, false, gatewayv1.ListenerReasonInvalid, "No usable TLS certificate: "+cl.TLS.Message)
			case served.Unserved != "":
				set(gatewayv1.ListenerConditionProgrammed, false, gatewayv1.ListenerReasonInvalid, "The Gateway is not served: "+unservedMessage)
			case slices.ContainsFunc(unusable, func(f bindreport.Failure) bool { return f.Port == cl.Port }):
				set(gatewayv1.ListenerConditionProgrammed, false, gatewayv1.ListenerReasonPending, unboundMessage(unusable, cl.Port))
			default:
				set(gatewayv1.ListenerConditionProgrammed, true, gatewayv1.ListenerReasonProgrammed, "Served by the Switchboard gateway")
			}
			setResolvedRefs(&ls, l.AllowedRoutes, cl.TLS, gen)
		}
		st.Listeners = append(st.Listeners, ls)
	}

	valid := len(gw.Spec.Listeners) - len(invalid)
	switch {
	case served.Rejected != "":
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionAccepted), false, served.Rejected, served.Message, gen)
	case len(invalid) == 0:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionAccepted), true, gatewayv1.GatewayReasonAccepted, "Gateway accepted", gen)
	default:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionAccepted), valid > 0, gatewayv1.GatewayReasonListenersNotValid,
			"Listeners not valid: "+strings.Join(invalid, ", "), gen)
	}
	switch {
	case served.Unserved != "":
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionProgrammed), false, served.Unserved, unservedMessage, gen)
	case valid == 0:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionProgrammed), false, gatewayv1.GatewayReasonInvalid, "No valid listener", gen)
	case len(unusable) > 0:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionProgrammed), false, gatewayv1.GatewayReasonAddressNotUsable,
			unboundMessage(unusable, 0), gen)
	default:
		setCondition(&st.Conditions, string(gatewayv1.GatewayConditionProgrammed), true, gatewayv1.GatewayReasonProgrammed,
			"Served by the Switchboard gateway on "+strings.Join(served.Addresses, ", "), gen)
	}
	return st
}

// unboundOf returns the failures of unbound at the addresses of served and the ports of
// its listeners that are served, in address order.
func unboundOf(served routetable.Gateway, listeners []routetable.Listener, unbound map[bindreport.Addr]string) []bindreport.Failure {
	var out []bindreport.Failure
	for _, ip := range served.Addresses {
		for _, l := range listeners {
			a := bindreport.Addr{IP: ip, Port: l.Port}
			msg, failed := unbound[a]
			if failed && l.Gateway == served.Gateway && l.Conflicted == "" &&
				!slices.ContainsFunc(out, func(f bindreport.Failure) bool { return f.Addr == a }) {
				out = append(out, bindreport.Failure{Addr: a, Error: msg})
			}
		}
	}
	return out
}

// unboundMessage says which of failures cannot be bound, those of port only unless it
// is 0.
func unboundMessage(failures []bindreport.Failure, port int32) string {
	var parts []string
	for _, f := range failures {
		if port == 0 || f.Port == port {
			parts = append(parts, fmt.Sprintf("%s cannot be bound (%s)", f.Addr, f.Error))
		}
	}
	return strings.Join(parts, "; ")
}

// unsupportedMessage says why the listener l, which the route table does not serve, is
// not supported.
func unsupportedMessage(l gatewayv1.Listener) string {
	if l.Protocol == gatewayv1.HTTPSProtocolType && l.TLS != nil && l.TLS.Mode != nil {
		return fmt.Sprintf("tls.mode %s is not supported on HTTPS listeners: only Terminate", *l.TLS.Mode)
	}
	return fmt.Sprintf("Protocol %s is not supported: only HTTP and HTTPS", l.Protocol)
}

// conflictMessage says what the Conflicted listener l conflicts with.
func conflictMessage(l routetable.Listener) string {
	if l.Conflicted == gatewayv1.ListenerReasonProtocolConflict {
		return fmt.Sprintf("Another listener of the Gateway uses port %d with another protocol", l.Port)
	}
	host := l.Hostname
	if host == "" {
		host = "any host"
	}
	return fmt.Sprintf("Another listener of the Gateway uses port %d for %s", l.Port, host)
}

// setResolvedRefs sets the supportedKinds and ResolvedRefs condition of an HTTP or
// HTTPS listener's status from its allowedRoutes and, for HTTPS, its certificates (tls;
// nil for HTTP). A certificateRef that does not resolve decides the reason.
func setResolvedRefs(ls *gatewayv1.ListenerStatus, ar *gatewayv1.AllowedRoutes, tls *routetable.ListenerTLS, gen int64) {
	kinds, unsupported := supportedKinds(ar)
	ls.SupportedKinds = kinds
	var problems []string
	reason := gatewayv1.ListenerReasonResolvedRefs
	if tls != nil && tls.Unresolved != "" {
		reason = tls.Unresolved
		problems = append(problems, tls.Message)
	}
	if len(unsupported) > 0 {
		if reason == gatewayv1.ListenerReasonResolvedRefs {
			reason = gatewayv1.ListenerReasonInvalidRouteKinds
		}
		problems = append(problems, "Route kinds not supported: "+strings.Join(unsupported, ", ")+"; only HTTPRoute")
	}
	if len(problems) > 0 {
		setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionResolvedRefs), false, reason, strings.Join(problems, "; "), gen)
		return
	}
	setCondition(&ls.Conditions, string(gatewayv1.ListenerConditionResolvedRefs), true, gatewayv1.ListenerReasonResolvedRefs, "All references resolved", gen)
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
// unchanged, then one Switchboard entry for each parent in st, which is nil when the
// route names none of Switchboard's Gateways.
func routeParents(route *gatewayv1.HTTPRoute, st *routetable.RouteStatus) []gatewayv1.RouteParentStatus {
	out := []gatewayv1.RouteParentStatus{}
	var ours []gatewayv1.RouteParentStatus
	for _, p := range route.Status.Parents {
		if p.ControllerName == routetable.ControllerName {
			ours = append(ours, p)
		} else {
			out = append(out, p)
		}
	}
	if st == nil {
		return out
	}
	gen := route.Generation
	for _, parent := range st.Parents {
		entry := gatewayv1.RouteParentStatus{ParentRef: parent.Ref, ControllerName: routetable.ControllerName}
		for _, p := range ours {
			if equality.Semantic.DeepEqual(p.ParentRef, parent.Ref) {
				// SetStatusCondition modifies in place; route.Status must stay as read.
				entry.Conditions = slices.Clone(p.Conditions)
			}
		}
		setCondition(&entry.Conditions, string(gatewayv1.RouteConditionAccepted), parent.Accepted, parent.Reason, parent.Message, gen)
		setCondition(&entry.Conditions, string(gatewayv1.RouteConditionResolvedRefs), st.ResolvedRefs == gatewayv1.RouteReasonResolvedRefs,
			st.ResolvedRefs, st.ResolvedRefsMessage, gen)
		if st.InvalidRules > 0 && st.InvalidRules < st.Rules {
			setCondition(&entry.Conditions, string(gatewayv1.RouteConditionPartiallyInvalid), true, gatewayv1.RouteReasonUnsupportedValue,
				"Rules answered with 500: "+st.InvalidMessage, gen)
		} else {
			meta.RemoveStatusCondition(&entry.Conditions, string(gatewayv1.RouteConditionPartiallyInvalid))
		}
		out = append(out, entry)
	}
	return out
}
