package gatewaystatus

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/bindreport"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// TestGatewayStatusListeners checks how the route table's view of a Gateway becomes its
// status, including states the API server's validation keeps envtest from reaching.
func TestGatewayStatusListeners(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "gw"}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", Generation: 3},
		Spec: gatewayv1.GatewaySpec{Listeners: []gatewayv1.Listener{
			{Name: "a", Port: 8080, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "again", Port: 8080, Protocol: gatewayv1.HTTPProtocolType},
		}},
	}
	for _, tc := range []struct {
		name       string
		served     routetable.Gateway
		listeners  []routetable.Listener
		unbound    map[bindreport.Addr]string
		unassigned string
		addresses  []string
		want       []statusCond
	}{{
		name:   "hostname conflict",
		served: routetable.Gateway{Gateway: key, Addresses: []string{"10.0.0.1"}},
		listeners: []routetable.Listener{
			{Gateway: key, Name: "a", Port: 8080, AttachedRoutes: 2},
			{Gateway: key, Name: "again", Port: 8080, Hostname: "a.example.com", Conflicted: gatewayv1.ListenerReasonHostnameConflict},
		},
		unbound:   map[bindreport.Addr]string{{IP: "10.0.0.2", Port: 8080}: "another Gateway's"},
		addresses: []string{"10.0.0.1"},
		want: []statusCond{
			{"", "Accepted", metav1.ConditionTrue, "ListenersNotValid", "Listeners not valid: again (HostnameConflict)"},
			{"", "Programmed", metav1.ConditionTrue, "Programmed", ""},
			{"a", "Conflicted", metav1.ConditionFalse, "NoConflicts", ""},
			{"again", "Conflicted", metav1.ConditionTrue, "HostnameConflict", "Another listener of the Gateway uses port 8080 for a.example.com"},
			{"again", "Accepted", metav1.ConditionFalse, "HostnameConflict", ""},
			{"again", "Programmed", metav1.ConditionFalse, "Invalid", ""},
		},
	}, {
		name:       "no address: the allocator's message",
		served:     routetable.Gateway{Gateway: key, Unserved: gatewayv1.GatewayReasonAddressNotAssigned, Message: "from the table"},
		listeners:  []routetable.Listener{{Gateway: key, Name: "a", Port: 8080}, {Gateway: key, Name: "again", Port: 8080}},
		unassigned: "pool exhausted",
		want: []statusCond{
			{"", "Accepted", metav1.ConditionTrue, "Accepted", ""},
			{"", "Programmed", metav1.ConditionFalse, "AddressNotAssigned", "pool exhausted"},
			{"a", "Accepted", metav1.ConditionTrue, "Accepted", ""},
			{"a", "Programmed", metav1.ConditionFalse, "Invalid", "The Gateway is not served: pool exhausted"},
		},
	}, {
		name: "unusable address: the table's message",
		served: routetable.Gateway{Gateway: key, Addresses: []string{"10.0.0.1"},
			Unserved: gatewayv1.GatewayReasonAddressNotUsable, Message: "already served"},
		listeners:  []routetable.Listener{{Gateway: key, Name: "a", Port: 8080}, {Gateway: key, Name: "again", Port: 8080}},
		unassigned: "ignored",
		addresses:  []string{"10.0.0.1"},
		want: []statusCond{
			{"", "Programmed", metav1.ConditionFalse, "AddressNotUsable", "already served"},
		},
	}, {
		name:      "an address a gateway replica cannot bind",
		served:    routetable.Gateway{Gateway: key, Addresses: []string{"10.0.0.1", "203.0.113.1"}},
		listeners: []routetable.Listener{{Gateway: key, Name: "a", Port: 8080}, {Gateway: key, Name: "again", Port: 8080}},
		unbound: map[bindreport.Addr]string{
			{IP: "203.0.113.1", Port: 8080}: "gateway 10.1.0.1:8081: bind: cannot assign requested address",
			{IP: "203.0.113.1", Port: 9090}: "not a port of this Gateway",
		},
		addresses: []string{"10.0.0.1"},
		want: []statusCond{
			{"", "Accepted", metav1.ConditionTrue, "Accepted", ""},
			{"", "Programmed", metav1.ConditionFalse, "AddressNotUsable",
				"203.0.113.1:8080 cannot be bound (gateway 10.1.0.1:8081: bind: cannot assign requested address)"},
			{"a", "Accepted", metav1.ConditionTrue, "Accepted", ""},
			{"a", "Programmed", metav1.ConditionFalse, "Pending",
				"203.0.113.1:8080 cannot be bound (gateway 10.1.0.1:8081: bind: cannot assign requested address)"},
		},
	}, {
		name: "an unsupported address type",
		served: routetable.Gateway{Gateway: key, Rejected: gatewayv1.GatewayReasonUnsupportedAddress,
			Unserved: gatewayv1.GatewayReasonInvalid, Message: "spec.addresses[0]: address type Hostname is not supported"},
		listeners: []routetable.Listener{{Gateway: key, Name: "a", Port: 8080}, {Gateway: key, Name: "again", Port: 8080}},
		want: []statusCond{
			{"", "Accepted", metav1.ConditionFalse, "UnsupportedAddress", "spec.addresses[0]: address type Hostname is not supported"},
			{"", "Programmed", metav1.ConditionFalse, "Invalid", ""},
			{"a", "Programmed", metav1.ConditionFalse, "Invalid", ""},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			st := gatewayStatus(gw, tc.served, tc.listeners, tc.unbound, tc.unassigned)
			var addresses []string
			for _, a := range st.Addresses {
				addresses = append(addresses, a.Value)
			}
			if !slices.Equal(addresses, tc.addresses) {
				t.Errorf("addresses %q, want %q", addresses, tc.addresses)
			}
			checkConditions(t, st, 3, tc.want)
			if st.Listeners[0].AttachedRoutes != tc.listeners[0].AttachedRoutes {
				t.Errorf("attachedRoutes %d, want %d", st.Listeners[0].AttachedRoutes, tc.listeners[0].AttachedRoutes)
			}
		})
	}
}

// TestHTTPSListenerStatus checks the conditions of HTTPS listeners: accepted whatever
// their certificates, programmed only with a usable one, ResolvedRefs from the route
// table's verdict on their certificateRefs; tls.mode Passthrough is not supported.
func TestHTTPSListenerStatus(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "gw"}
	https := func(name string) gatewayv1.Listener {
		return gatewayv1.Listener{Name: gatewayv1.SectionName(name), Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
			TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "cert"}}}}
	}
	passthrough := https("passthrough")
	passthrough.Port = 8443
	passthrough.TLS.Mode = new(gatewayv1.TLSModePassthrough)
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", Generation: 2},
		Spec:       gatewayv1.GatewaySpec{Listeners: []gatewayv1.Listener{https("good"), https("missing"), https("foreign"), passthrough}},
	}
	cert := &tls.Certificate{}
	served := routetable.Gateway{Gateway: key, Addresses: []string{"10.0.0.1"}}
	listeners := []routetable.Listener{
		{Gateway: key, Name: "good", Port: 443, Hostname: "good.example", AttachedRoutes: 1,
			TLS: &routetable.ListenerTLS{Certificates: []*tls.Certificate{cert}}},
		{Gateway: key, Name: "missing", Port: 443, Hostname: "missing.example", AttachedRoutes: 1,
			TLS: &routetable.ListenerTLS{Unresolved: gatewayv1.ListenerReasonInvalidCertificateRef, Message: "Secret ns/cert not found"}},
		{Gateway: key, Name: "foreign", Port: 443, Hostname: "foreign.example",
			TLS: &routetable.ListenerTLS{Unresolved: gatewayv1.ListenerReasonRefNotPermitted, Message: "no ReferenceGrant"}},
	}
	st := gatewayStatus(gw, served, listeners, nil, "")
	checkConditions(t, st, 2, []statusCond{
		{"", "Accepted", metav1.ConditionTrue, "ListenersNotValid",
			"Listeners not valid: missing (InvalidCertificateRef), foreign (RefNotPermitted), passthrough (UnsupportedProtocol)"},
		{"", "Programmed", metav1.ConditionTrue, "Programmed", ""},
		{"good", "Accepted", metav1.ConditionTrue, "Accepted", ""},
		{"good", "Programmed", metav1.ConditionTrue, "Programmed", ""},
		{"good", "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", ""},
		{"missing", "Accepted", metav1.ConditionTrue, "Accepted", ""},
		{"missing", "Programmed", metav1.ConditionFalse, "Invalid", "No usable TLS certificate: Secret ns/cert not found"},
		{"missing", "ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef", "Secret ns/cert not found"},
		{"foreign", "Programmed", metav1.ConditionFalse, "Invalid", ""},
		{"foreign", "ResolvedRefs", metav1.ConditionFalse, "RefNotPermitted", ""},
		{"passthrough", "Accepted", metav1.ConditionFalse, "UnsupportedProtocol", "tls.mode Passthrough is not supported on HTTPS listeners: only Terminate"},
		{"passthrough", "Programmed", metav1.ConditionFalse, "Invalid", ""},
	})
	for i, want := range []int32{1, 1, 0, 0} {
		ls := st.Listeners[i]
		if ls.AttachedRoutes != want {
			t.Errorf("listener %s: attachedRoutes %d, want %d (routes attach whatever the certificates)", ls.Name, ls.AttachedRoutes, want)
		}
		if kinds := ls.SupportedKinds; i < 3 && (len(kinds) != 1 || kinds[0].Kind != "HTTPRoute") {
			t.Errorf("listener %s: supportedKinds %+v, want HTTPRoute", ls.Name, kinds)
		}
	}

	// With no listener programmed, neither is the Gateway.
	st = gatewayStatus(gw, served, listeners[1:], nil, "")
	if c := meta.FindStatusCondition(st.Conditions, "Programmed"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Invalid" {
		t.Errorf("Gateway without a usable certificate: Programmed %+v, want False Invalid", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, "Accepted"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ListenersNotValid" {
		t.Errorf("Gateway without a usable certificate: Accepted %+v, want False ListenersNotValid", c)
	}
}

func TestSupportedFeaturesAreSortedAndCore(t *testing.T) {
	got := supportedFeatures()
	if !slices.IsSortedFunc(got, func(a, b gatewayv1.SupportedFeature) int { return strings.Compare(string(a.Name), string(b.Name)) }) {
		t.Errorf("supportedFeatures() = %v, not sorted by name as the GatewayClass API requires", got)
	}
	for _, core := range []gatewayv1.FeatureName{"Gateway", "HTTPRoute", "ReferenceGrant"} {
		if !slices.ContainsFunc(got, func(f gatewayv1.SupportedFeature) bool { return f.Name == core }) {
			t.Errorf("supportedFeatures() = %v lacks the GATEWAY-HTTP Core feature %s", got, core)
		}
	}
}

// statusCond is a condition a status must have: of the Gateway (listener "") or of one
// of its listeners.
type statusCond struct {
	listener gatewayv1.SectionName
	typ      string
	status   metav1.ConditionStatus
	reason   string
	message  string // checked when not empty
}

// checkConditions checks that st has every condition of want, at generation.
func checkConditions(t *testing.T, st gatewayv1.GatewayStatus, generation int64, want []statusCond) {
	t.Helper()
	for _, w := range want {
		conds := st.Conditions
		if w.listener != "" {
			conds = nil
			for _, ls := range st.Listeners {
				if ls.Name == w.listener {
					conds = ls.Conditions
				}
			}
		}
		c := meta.FindStatusCondition(conds, w.typ)
		switch {
		case c == nil:
			t.Errorf("listener %q: no %s condition", w.listener, w.typ)
		case c.Status != w.status || c.Reason != w.reason || c.ObservedGeneration != generation || w.message != "" && c.Message != w.message:
			t.Errorf("listener %q: %s=%s %s gen %d %q, want %s %s gen %d %q",
				w.listener, w.typ, c.Status, c.Reason, c.ObservedGeneration, c.Message, w.status, w.reason, generation, w.message)
		}
	}
}
