package routetable

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// tlsAddr is the TLS address of fixture Gateways' port 443.
var tlsAddr = Addr{IP: gatewayIP, Port: 443, TLS: true}

func TestParseCertificate(t *testing.T) {
	good, _ := testenv.TLSSecret(t, ns, "good", "example.com")
	other, _ := testenv.TLSSecret(t, ns, "other", "example.com")
	with := func(change func(*corev1.Secret)) *corev1.Secret {
		s := good.DeepCopy()
		change(s)
		return s
	}
	if c := ParseCertificate(good); c.TLS == nil || c.Invalid != nil || c.TLS.Leaf == nil || c.TLS.Leaf.DNSNames[0] != "example.com" {
		t.Fatalf("a kubernetes.io/tls Secret: %+v, want its certificate with the leaf parsed", c)
	}
	for name, secret := range map[string]*corev1.Secret{
		"Opaque type": with(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }),
		"no tls.key":  with(func(s *corev1.Secret) { delete(s.Data, corev1.TLSPrivateKeyKey) }),
		"no tls.crt":  with(func(s *corev1.Secret) { delete(s.Data, corev1.TLSCertKey) }),
		"not PEM": with(func(s *corev1.Secret) {
			s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = []byte("Hello world\n"), []byte("Hello world\n")
		}),
		"another cert key": with(func(s *corev1.Secret) { s.Data[corev1.TLSPrivateKeyKey] = other.Data[corev1.TLSPrivateKeyKey] }),
	} {
		if c := ParseCertificate(secret); c.TLS != nil || c.Invalid == nil {
			t.Errorf("%s: %+v, want no certificate and why", name, c)
		}
	}
}

func TestCertificateRefsOfAGateway(t *testing.T) {
	gw := aGateway("gw").Listening(
		onHTTPS("a", 443).WithCertificates(secretRef("one"), secretRef("certs/two"), secretRef("one")),
		onHTTPS("b", 8443).WithCertificates(secretRef("one"), gatewayv1.SecretObjectReference{Kind: ptr(gatewayv1.Kind("ConfigMap")), Name: "cm"},
			gatewayv1.SecretObjectReference{Group: ptr(gatewayv1.Group("example.com")), Name: "x"},
			gatewayv1.SecretObjectReference{Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Secret")), Name: "three"}),
		onHTTP("web", 80),
	).gw
	want := []types.NamespacedName{nn(ns, "one"), nn("certs", "two"), nn(ns, "three")}
	if got := CertificateRefs(gw); !slices.Equal(got, want) {
		t.Errorf("CertificateRefs = %v, want %v", got, want)
	}
}

// TestListenerCertificates checks the ResolvedRefs rules of HTTPS listeners: only a
// core Secret of type kubernetes.io/tls holding a certificate resolves, and only Gateways
// in namespaces a ReferenceGrant names may use one from another namespace. A listener
// whose certificate does not resolve presents no certificate.
func TestListenerCertificates(t *testing.T) {
	cert, _ := testenv.TLSSecret(t, ns, "cert", "*")
	inCerts := cert.DeepCopy()
	inCerts.Namespace = "certs"
	malformed := cert.DeepCopy()
	malformed.Data[corev1.TLSCertKey], malformed.Data[corev1.TLSPrivateKeyKey] = []byte("Hello world\n"), []byte("Hello world\n")
	opaque := cert.DeepCopy()
	opaque.Type = corev1.SecretTypeOpaque
	existing := secrets{"default/cert": cert, "certs/cert": inCerts, "default/malformed": malformed, "default/opaque": opaque}

	const (
		resolved     = gatewayv1.ListenerConditionReason("")
		invalid      = gatewayv1.ListenerReasonInvalidCertificateRef
		notPermitted = gatewayv1.ListenerReasonRefNotPermitted
	)
	cases := []struct {
		name     string
		listener *listenerBuilder
		extra    []any
		want     gatewayv1.ListenerConditionReason
		certs    int
		message  string // checked when not empty
	}{
		{"a Secret in the Gateway's namespace", onHTTPS("https", 443).WithCertificates(secretRef("cert")), nil, resolved, 1, ""},
		{"group and kind spelled out", onHTTPS("https", 443).WithCertificates(gatewayv1.SecretObjectReference{
			Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Secret")), Name: "cert"}), nil, resolved, 1, ""},
		{"a missing Secret", onHTTPS("https", 443).WithCertificates(secretRef("nonexistent")), nil, invalid, 0,
			"tls.certificateRefs[0]: Secret default/nonexistent not found"},
		{"another group", onHTTPS("https", 443).WithCertificates(gatewayv1.SecretObjectReference{
			Group: ptr(gatewayv1.Group("wrong.group.company.io")), Kind: ptr(gatewayv1.Kind("Secret")), Name: "cert"}), nil, invalid, 0,
			"tls.certificateRefs[0]: kind wrong.group.company.io/Secret is not supported: only core Secrets"},
		{"another kind", onHTTPS("https", 443).WithCertificates(gatewayv1.SecretObjectReference{
			Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("WrongKind")), Name: "cert"}), nil, invalid, 0, ""},
		{"a malformed certificate", onHTTPS("https", 443).WithCertificates(secretRef("malformed")), nil, invalid, 0, ""},
		{"a Secret not of type kubernetes.io/tls", onHTTPS("https", 443).WithCertificates(secretRef("opaque")), nil, invalid, 0, ""},
		{"no tls at all", onHTTPS("https", 443), nil, invalid, 0, ""},
		{"one of two references resolves", onHTTPS("https", 443).WithCertificates(secretRef("nonexistent"), secretRef("cert")), nil, invalid, 1, ""},
		{"another namespace without a ReferenceGrant", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")), nil, notPermitted, 0,
			"tls.certificateRefs[0]: no ReferenceGrant in namespace certs permits Gateways in default to reference Secret cert"},
		{"another namespace, a grant of every Secret", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grantSecretsIn("certs", ns)}, resolved, 1, ""},
		{"another namespace, a grant of that Secret", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grantSecretsIn("certs", ns, "cert")}, resolved, 1, ""},
		{"another namespace, a grant of another Secret", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grantSecretsIn("certs", ns, "other")}, notPermitted, 0, ""},
		{"another namespace, a grant for Gateways of another namespace", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grantSecretsIn("certs", "elsewhere")}, notPermitted, 0, ""},
		{"another namespace, a grant in a third namespace", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grantSecretsIn("elsewhere", ns)}, notPermitted, 0, ""},
		{"a grant for HTTPRoutes does not let Gateways reference Secrets", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grant("certs", "HTTPRoute", ns, "Secret")}, notPermitted, 0, ""},
		{"a grant to Services does not let Gateways reference Secrets", onHTTPS("https", 443).WithCertificates(secretRef("certs/cert")),
			[]any{grant("certs", "Gateway", ns, "Service")}, notPermitted, 0, ""},
		{"another namespace is checked before the kind", onHTTPS("https", 443).WithCertificates(gatewayv1.SecretObjectReference{
			Kind: ptr(gatewayv1.Kind("WrongKind")), Namespace: ptr(gatewayv1.Namespace("certs")), Name: "cert"}), nil, notPermitted, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := append([]any{switchboardClass(), existing, aGateway("gw").Listening(tc.listener)}, tc.extra...)
			tbl := build(t, objs...)
			ls := tbl.Listeners()
			if len(ls) != 1 || ls[0].TLS == nil {
				t.Fatalf("Listeners() = %+v, want one HTTPS listener", ls)
			}
			got := ls[0].TLS
			if got.Unresolved != tc.want || len(got.Certificates) != tc.certs || (got.Unresolved == "") != (got.Message == "") ||
				tc.message != "" && got.Message != tc.message {
				t.Errorf("TLS = %+v, want Unresolved %q, %d certificates, message %q", got, tc.want, tc.certs, tc.message)
			}
			// Only a listener with a certificate is listened on and presents one.
			served := slices.Contains(tbl.Addrs(), tlsAddr)
			presented := tbl.Certificates(tlsAddr, "example.com")
			if served != (tc.certs > 0) || len(presented) != tc.certs {
				t.Errorf("address listened on: %v, certificates presented: %d, want %v and %d", served, len(presented), tc.certs > 0, tc.certs)
			}
		})
	}
}

func TestPassthroughIsNotServed(t *testing.T) {
	l := onHTTPS("https", 443).WithCertificates(secretRef("cert"))
	l.l.TLS.Mode = ptr(gatewayv1.TLSModePassthrough)
	tbl := build(t, switchboardClass(), aGateway("gw").Listening(l), aRoute("r").AttachedTo("gw").With(aRule()))
	if len(tbl.Listeners()) != 0 || len(tbl.Addrs()) != 0 {
		t.Errorf("an HTTPS Passthrough listener: Listeners() = %+v, Addrs() = %v, want none", tbl.Listeners(), tbl.Addrs())
	}
}

// conformanceListeners are the listeners of the conformance suite's Gateway
// same-namespace-with-https-listener, each with a certificate of its own, and the routes
// of its misdirected-requests test, one per listener.
func conformanceListeners(t *testing.T) []any {
	t.Helper()
	existing := secrets{}
	listener := func(name, host string) *listenerBuilder {
		s, _ := testenv.TLSSecret(t, ns, name, "*")
		existing[ns+"/"+name] = s
		l := onHTTPS(name, 443).WithCertificates(secretRef(name))
		if host != "" {
			l.ForHost(host)
		}
		return l
	}
	return []any{switchboardClass(),
		aGateway("gw").Listening(listener("https", ""), listener("https-with-hostname", "second-example.org"),
			listener("https-with-wildcard-hostname", "*.wildcard.org"), listener("https-with-hostname-matching-wildcard", "fourth-example.wildcard.org")),
		existing,
		aRoute("test-1").AttachedTo("gw", section("https")).ForHosts("example.org").With(aRule().PathPrefix("/detect-misdirected-requests")),
		aRoute("test-2").AttachedTo("gw", section("https-with-hostname")).With(aRule().PathPrefix("/detect-misdirected-requests")),
		aRoute("test-3").AttachedTo("gw", section("https-with-wildcard-hostname")).With(aRule().PathPrefix("/detect-misdirected-requests")),
		aRoute("test-4").AttachedTo("gw", section("https-with-hostname-matching-wildcard")).With(aRule().PathPrefix("/detect-misdirected-requests")),
	}
}

func TestCertificateBySNI(t *testing.T) {
	objs := conformanceListeners(t)
	tbl := build(t, objs...)
	existing := objs[2].(secrets)
	owner := func(certs []*tls.Certificate) string {
		for name, s := range existing {
			if len(certs) == 1 && string(certs[0].Certificate[0]) == string(ParseCertificate(s).TLS.Certificate[0]) {
				return strings.TrimPrefix(name, ns+"/")
			}
		}
		return fmt.Sprintf("%d certificates", len(certs))
	}
	for _, tc := range []struct{ serverName, want string }{
		{"example.org", "https"},
		{"unknown-example.org", "https"},
		{"", "https"}, // no SNI: only a listener without hostname matches
		{"second-example.org", "https-with-hostname"},
		{"SECOND-example.org.", "https-with-hostname"},
		{"third-example.wildcard.org", "https-with-wildcard-hostname"},
		{"fourth-example.wildcard.org", "https-with-hostname-matching-wildcard"},
		{"wildcard.org", "https"}, // a wildcard needs a label in front
	} {
		if got := owner(tbl.Certificates(tlsAddr, tc.serverName)); got != tc.want {
			t.Errorf("server name %q: certificate of %s, want %s", tc.serverName, got, tc.want)
		}
	}
	if got := tbl.Certificates(Addr{IP: gatewayIP, Port: 443}, "example.org"); got != nil {
		t.Errorf("the same port as a plain HTTP address presents %d certificates, want none", len(got))
	}

	// Without a listener for every name, an unknown name gets no certificate at all.
	only := build(t, switchboardClass(), objs[2], aGateway("gw").Listening(onHTTPS("https-with-hostname", 443).ForHost("second-example.org").
		WithCertificates(secretRef("https-with-hostname"))))
	if got := only.Certificates(tlsAddr, "example.org"); got != nil {
		t.Errorf("a name no listener owns got %d certificates, want none", len(got))
	}
	if got := only.Certificates(tlsAddr, ""); got != nil {
		t.Errorf("no server name got %d certificates, want none", len(got))
	}
}

// TestMisdirectedRequests runs the cases of the conformance test
// HTTPRouteHTTPSListenerDetectMisdirectedRequests: a request whose host belongs to
// another listener than the one its connection's server name chose answers 421.
func TestMisdirectedRequests(t *testing.T) {
	tbl := build(t, conformanceListeners(t)...)
	for _, tc := range []struct{ serverName, host, want string }{
		{"example.org", "example.org", "default/test-1#0"},
		{"example.org", "second-example.org", "421"},
		{"example.org", "unknown-example.org", "404"},
		{"second-example.org", "second-example.org", "default/test-2#0"},
		{"second-example.org", "example.org", "421"},
		{"second-example.org", "unknown-example.org", "421"},
		{"third-example.wildcard.org", "third-example.wildcard.org", "default/test-3#0"},
		{"third-example.wildcard.org", "fith-example.wildcard.org", "default/test-3#0"},
		{"third-example.wildcard.org", "fourth-example.wildcard.org", "421"},
		{"third-example.wildcard.org", "second-example.org", "421"},
		{"third-example.wildcard.org", "unknown-example.org", "421"},
		{"fourth-example.wildcard.org", "fourth-example.wildcard.org", "default/test-4#0"},
		{"fourth-example.wildcard.org", "fith-example.wildcard.org", "421"},
		{"unknown-example.org", "example.org", "default/test-1#0"},
		{"unknown-example.org", "unknown-example.org", "404"},
		{"second-example.org", "second-example.org:443", "default/test-2#0"},
	} {
		r := request("GET https://" + tc.host + "/detect-misdirected-requests")
		got := "421"
		if !tbl.Misdirected(tlsAddr, tc.serverName, r.Host) {
			got = servedAt(tbl, tlsAddr, r)
		}
		if got != tc.want {
			t.Errorf("server name %s, host %s: %s, want %s", tc.serverName, tc.host, got, tc.want)
		}
	}
	// Plain HTTP has no server name to disagree with.
	http := build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("a", 80), onHTTP("b", 80).ForHost("b.example.com")))
	if http.Misdirected(Addr{IP: gatewayIP, Port: 80}, "", "b.example.com") {
		t.Error("a request on an HTTP address is misdirected")
	}
}

// TestHTTPSListenerIsolation checks that an HTTPS listener's routes, like an HTTP one's,
// never answer for a more specific sibling listener, even one without a usable
// certificate.
func TestHTTPSListenerIsolation(t *testing.T) {
	cert, _ := testenv.TLSSecret(t, ns, "cert", "*")
	tbl := build(t, switchboardClass(), secrets{"default/cert": cert},
		aGateway("gw").Listening(onHTTPS("any", 443).WithCertificates(secretRef("cert")),
			onHTTPS("a", 443).ForHost("a.example.com").WithCertificates(secretRef("missing"))),
		aRoute("for-any").AttachedTo("gw", section("any")).With(aRule()),
		aRoute("for-a").AttachedTo("gw", section("a")).With(aRule()),
	)
	for _, tc := range []struct{ host, want string }{
		{"b.example.com", "default/for-any#0"},
		{"a.example.com", "default/for-a#0"}, // never completes a handshake: no certificate
	} {
		if got := servedAt(tbl, tlsAddr, request(http.MethodGet+" https://"+tc.host+"/")); got != tc.want {
			t.Errorf("host %s served %s, want %s", tc.host, got, tc.want)
		}
	}
	if got := tbl.Certificates(tlsAddr, "a.example.com"); got != nil {
		t.Errorf("a.example.com got the certificate of another listener")
	}
	if !tbl.Misdirected(tlsAddr, "b.example.com", "a.example.com") {
		t.Error("a request for a.example.com on a connection for b.example.com is not misdirected")
	}
}
