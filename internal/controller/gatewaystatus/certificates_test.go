package gatewaystatus_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/controller/gatewaystatus"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// httpsListener returns an HTTPS listener on port 443 for hostname, terminating TLS with
// the certificate of the Secret secret ("namespace/name" in another namespace).
func httpsListener(name, hostname, secret string) gatewayv1.Listener {
	ref := gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(secret)}
	for i := range secret {
		if secret[i] == '/' {
			ref.Namespace, ref.Name = ptr.To(gatewayv1.Namespace(secret[:i])), gatewayv1.ObjectName(secret[i+1:])
		}
	}
	return gatewayv1.Listener{
		Name: gatewayv1.SectionName(name), Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
		Hostname: ptr.To(gatewayv1.Hostname(hostname)),
		TLS:      &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{ref}},
	}
}

// listenerResolved is the listener checks of an HTTPS listener whose certificate does
// or does not resolve (with reason).
func listenerResolved(l gatewayv1.SectionName, reason gatewayv1.ListenerConditionReason) []gatewayCheck {
	if reason == gatewayv1.ListenerReasonResolvedRefs {
		return []gatewayCheck{
			{l, string(gatewayv1.ListenerConditionResolvedRefs), metav1.ConditionTrue, string(reason)},
			{l, string(gatewayv1.ListenerConditionProgrammed), metav1.ConditionTrue, string(gatewayv1.ListenerReasonProgrammed)},
			{l, string(gatewayv1.ListenerConditionAccepted), metav1.ConditionTrue, string(gatewayv1.ListenerReasonAccepted)},
		}
	}
	return []gatewayCheck{
		{l, string(gatewayv1.ListenerConditionResolvedRefs), metav1.ConditionFalse, string(reason)},
		{l, string(gatewayv1.ListenerConditionProgrammed), metav1.ConditionFalse, string(gatewayv1.ListenerReasonInvalid)},
		{l, string(gatewayv1.ListenerConditionAccepted), metav1.ConditionTrue, string(gatewayv1.ListenerReasonAccepted)},
	}
}

// TestListenerCertificateConditions walks HTTPS listeners through the certificate
// conditions the conformance tests expect, each change of a Secret or ReferenceGrant
// being noticed: a missing Secret, then created; a malformed one, then fixed; one in
// another namespace without a ReferenceGrant, then with one, then with it gone.
func TestListenerCertificateConditions(t *testing.T) {
	e := start(t, gatewaystatus.DefaultAddressPool)
	ctx := context.Background()
	ns, certs := e.namespace(nil), e.namespace(nil)

	good, _ := testenv.TLSSecret(t, ns, "good", "*.example.com")
	malformed, _ := testenv.TLSSecret(t, ns, "malformed", "*.example.com")
	fixed := malformed.DeepCopy()
	malformed.Data[corev1.TLSCertKey], malformed.Data[corev1.TLSPrivateKeyKey] = []byte("Hello world\n"), []byte("Hello world\n")
	foreign, _ := testenv.TLSSecret(t, certs, "foreign", "*.example.com")
	gw := e.gateway(ns, "gw", "",
		httpsListener("good", "good.example.com", "good"),
		httpsListener("missing", "missing.example.com", "later"),
		httpsListener("malformed", "malformed.example.com", "malformed"),
		httpsListener("foreign", "foreign.example.com", certs+"/foreign"),
	)
	r := route(ns, "route", gatewayv1.ParentReference{Name: "gw", SectionName: ptr.To(gatewayv1.SectionName("missing"))}, rule(nil))
	e.c.Create(t, good, malformed, foreign, gw, r)
	key := client.ObjectKeyFromObject(gw)

	check := func(want map[gatewayv1.SectionName]gatewayv1.ListenerConditionReason) *gatewayv1.Gateway {
		t.Helper()
		var checks []gatewayCheck
		for l, reason := range want {
			checks = append(checks, listenerResolved(l, reason)...)
		}
		return e.waitForGateway(key, append(checks, programmed())...)
	}
	got := check(map[gatewayv1.SectionName]gatewayv1.ListenerConditionReason{
		"good":      gatewayv1.ListenerReasonResolvedRefs,
		"missing":   gatewayv1.ListenerReasonInvalidCertificateRef,
		"malformed": gatewayv1.ListenerReasonInvalidCertificateRef,
		"foreign":   gatewayv1.ListenerReasonRefNotPermitted,
	})
	for _, ls := range got.Status.Listeners {
		if len(ls.SupportedKinds) != 1 || ls.SupportedKinds[0].Kind != "HTTPRoute" {
			t.Errorf("listener %s supportedKinds %+v, want HTTPRoute", ls.Name, ls.SupportedKinds)
		}
	}
	// The route may be seen after the listeners' conditions were first written.
	eventually(t, "the route attached to the listener without a certificate", func() error {
		if err := e.c.Get(ctx, key, got); err != nil {
			return err
		}
		for _, ls := range got.Status.Listeners {
			if want := map[gatewayv1.SectionName]int32{"missing": 1}[ls.Name]; ls.AttachedRoutes != want {
				return fmt.Errorf("listener %s attachedRoutes %d, want %d: a route attaches whatever the certificate", ls.Name, ls.AttachedRoutes, want)
			}
		}
		return nil
	})
	e.waitForRoute(client.ObjectKeyFromObject(r), routeWant{accepted: gatewayv1.RouteReasonAccepted, resolvedRefs: gatewayv1.RouteReasonResolvedRefs})

	// The missing Secret appears, the malformed one is fixed, and a ReferenceGrant admits
	// the foreign one: every listener resolves.
	later, _ := testenv.TLSSecret(t, ns, "later", "*.example.com")
	e.c.Create(t, later, &gatewayv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: certs, Name: "gateways"},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "Gateway", Namespace: gatewayv1.Namespace(ns)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: "Secret", Name: ptr.To(gatewayv1.ObjectName("foreign"))}},
		},
	})
	eventually(t, "fix the malformed Secret", func() error {
		var s corev1.Secret
		if err := e.k.Get(ctx, client.ObjectKeyFromObject(malformed), &s); err != nil {
			return err
		}
		s.Data = fixed.Data
		return e.k.Update(ctx, &s)
	})
	check(map[gatewayv1.SectionName]gatewayv1.ListenerConditionReason{
		"good": gatewayv1.ListenerReasonResolvedRefs, "missing": gatewayv1.ListenerReasonResolvedRefs,
		"malformed": gatewayv1.ListenerReasonResolvedRefs, "foreign": gatewayv1.ListenerReasonResolvedRefs,
	})

	// Deleting the grant and a Secret refuses them again.
	for _, obj := range []client.Object{
		&gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: certs, Name: "gateways"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "good"}},
	} {
		if err := e.k.Delete(ctx, obj); err != nil {
			t.Fatal(fmt.Errorf("delete %T: %w", obj, err))
		}
	}
	check(map[gatewayv1.SectionName]gatewayv1.ListenerConditionReason{
		"good": gatewayv1.ListenerReasonInvalidCertificateRef, "missing": gatewayv1.ListenerReasonResolvedRefs,
		"foreign": gatewayv1.ListenerReasonRefNotPermitted,
	})
}
