package routetable

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Fixture builders: build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80)),
// aRoute("chat").AttachedTo("gw").With(aRule().PathPrefix("/v1")))

const ns = "default"

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// build compiles a table from builders and API objects, in any order.
func build(t testing.TB, objs ...any) *Table {
	t.Helper()
	var in Input
	for _, o := range objs {
		switch o := o.(type) {
		case *gatewayv1.GatewayClass:
			in.Classes = append(in.Classes, o)
		case *gatewayBuilder:
			in.Gateways = append(in.Gateways, o.gw)
		case *routeBuilder:
			in.Routes = append(in.Routes, o.r)
		case *gatewayv1.ReferenceGrant:
			in.ReferenceGrants = append(in.ReferenceGrants, o)
		case namespaceLabels:
			in.NamespaceLabels = func(ns string) map[string]string { return o[ns] }
		case services:
			in.ServiceExists = func(k types.NamespacedName) bool { return slices.Contains(o, k.String()) }
		case pools:
			in.Pool = func(k types.NamespacedName) (Pool, bool) {
				i := slices.IndexFunc(o, func(p Pool) bool { return p.Key == k })
				if i < 0 {
					return Pool{}, false
				}
				return o[i], true
			}
		case policyStates:
			in.Policy = func(k types.NamespacedName) (bool, error) {
				err, ok := o[k.String()]
				return ok, err
			}
		case secrets:
			in.Certificate = func(k types.NamespacedName) (Certificate, bool) {
				s, ok := o[k.String()]
				if !ok {
					return Certificate{}, false
				}
				return ParseCertificate(s), true
			}
		default:
			t.Fatalf("build: unexpected fixture %T", o)
		}
	}
	return Build(in)
}

// namespaceLabels gives Input.NamespaceLabels: namespace → labels.
type namespaceLabels map[string]map[string]string

// services gives Input.ServiceExists: the "namespace/name" of every Service that exists.
type services []string

// pools gives Input.Pool: the InferencePools that exist.
type pools []Pool

// policyStates gives Input.Policy: "namespace/name" of every RoutingPolicy that exists →
// why it is invalid (nil when valid).
type policyStates map[string]error

// secrets gives Input.Certificate: "namespace/name" of every Secret that exists → the
// Secret, parsed with ParseCertificate.
type secrets map[string]*corev1.Secret

func switchboardClass() *gatewayv1.GatewayClass { return aClass("switchboard", ControllerName) }

func aClass(name, controller string) *gatewayv1.GatewayClass {
	return &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: gatewayv1.GatewayController(controller)},
	}
}

type gatewayBuilder struct {
	gw *gatewayv1.Gateway
	// addressed is set once At replaced the default address.
	addressed bool
}

// gatewayIP is the address fixture Gateways ask for unless told otherwise.
const gatewayIP = "127.0.0.1"

// aGateway is a Gateway in the default namespace of class "switchboard", created at
// epoch, asking for address gatewayIP.
func aGateway(name string) *gatewayBuilder {
	return &gatewayBuilder{gw: &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(epoch)},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "switchboard",
			Addresses: []gatewayv1.GatewaySpecAddress{{Value: gatewayIP}}},
	}}
}

// At makes the Gateway ask for address ip, after the ones At asked for before on this
// builder, instead of gatewayIP; "" asks for none.
func (b *gatewayBuilder) At(ip string) *gatewayBuilder {
	if !b.addressed {
		b.gw.Spec.Addresses, b.addressed = nil, true
	}
	if ip != "" {
		b.gw.Spec.Addresses = append(b.gw.Spec.Addresses, gatewayv1.GatewaySpecAddress{Value: ip})
	}
	return b
}

// AtHostname adds an address of type Hostname to the ones the Gateway asks for.
func (b *gatewayBuilder) AtHostname(name string) *gatewayBuilder {
	b.gw.Spec.Addresses = append(b.gw.Spec.Addresses, gatewayv1.GatewaySpecAddress{Type: ptr(gatewayv1.HostnameAddressType), Value: name})
	return b
}

// Assigned records ip in the Gateway's status.addresses, as the manager allocates it.
func (b *gatewayBuilder) Assigned(ip string) *gatewayBuilder {
	b.gw.Status.Addresses = append(b.gw.Status.Addresses, gatewayv1.GatewayStatusAddress{Value: ip})
	return b
}

func (b *gatewayBuilder) CreatedAt(offset time.Duration) *gatewayBuilder {
	b.gw.CreationTimestamp = metav1.NewTime(epoch.Add(offset))
	return b
}

func (b *gatewayBuilder) InNamespace(n string) *gatewayBuilder { b.gw.Namespace = n; return b }
func (b *gatewayBuilder) OfClass(c string) *gatewayBuilder {
	b.gw.Spec.GatewayClassName = gatewayv1.ObjectName(c)
	return b
}
func (b *gatewayBuilder) Listening(ls ...*listenerBuilder) *gatewayBuilder {
	for _, l := range ls {
		b.gw.Spec.Listeners = append(b.gw.Spec.Listeners, l.l)
	}
	return b
}

type listenerBuilder struct{ l gatewayv1.Listener }

func onHTTP(name string, port int32) *listenerBuilder {
	return &listenerBuilder{l: gatewayv1.Listener{
		Name: gatewayv1.SectionName(name), Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType,
	}}
}

func onHTTPS(name string, port int32) *listenerBuilder {
	l := onHTTP(name, port)
	l.l.Protocol = gatewayv1.HTTPSProtocolType
	return l
}

// WithCertificates sets the listener's tls.certificateRefs.
func (b *listenerBuilder) WithCertificates(refs ...gatewayv1.SecretObjectReference) *listenerBuilder {
	b.l.TLS = &gatewayv1.ListenerTLSConfig{CertificateRefs: refs}
	return b
}

// secretRef is a certificateRef to the Secret name, or namespace/name in another
// namespace.
func secretRef(name string) gatewayv1.SecretObjectReference {
	ref := gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(name)}
	if ns, n, ok := strings.Cut(name, "/"); ok {
		ref.Namespace, ref.Name = ptr(gatewayv1.Namespace(ns)), gatewayv1.ObjectName(n)
	}
	return ref
}

func (b *listenerBuilder) ForHost(h string) *listenerBuilder {
	b.l.Hostname = ptr(gatewayv1.Hostname(h))
	return b
}
func (b *listenerBuilder) namespaces() *gatewayv1.RouteNamespaces {
	if b.l.AllowedRoutes == nil {
		b.l.AllowedRoutes = &gatewayv1.AllowedRoutes{}
	}
	if b.l.AllowedRoutes.Namespaces == nil {
		b.l.AllowedRoutes.Namespaces = &gatewayv1.RouteNamespaces{}
	}
	return b.l.AllowedRoutes.Namespaces
}
func (b *listenerBuilder) FromAllNamespaces() *listenerBuilder {
	b.namespaces().From = ptr(gatewayv1.NamespacesFromAll)
	return b
}
func (b *listenerBuilder) FromNoNamespaces() *listenerBuilder {
	b.namespaces().From = ptr(gatewayv1.NamespacesFromNone)
	return b
}
func (b *listenerBuilder) FromNamespacesLabelled(k, v string) *listenerBuilder {
	n := b.namespaces()
	n.From = ptr(gatewayv1.NamespacesFromSelector)
	n.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	return b
}
func (b *listenerBuilder) AllowingKinds(kinds ...string) *listenerBuilder {
	b.namespaces()
	for _, k := range kinds {
		b.l.AllowedRoutes.Kinds = append(b.l.AllowedRoutes.Kinds, gatewayv1.RouteGroupKind{Kind: gatewayv1.Kind(k)})
	}
	return b
}

type routeBuilder struct{ r *gatewayv1.HTTPRoute }

// aRoute is an HTTPRoute in the default namespace created at epoch.
func aRoute(name string) *routeBuilder {
	return &routeBuilder{r: &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(epoch),
	}}}
}

func (b *routeBuilder) InNamespace(n string) *routeBuilder { b.r.Namespace = n; return b }
func (b *routeBuilder) CreatedAt(offset time.Duration) *routeBuilder {
	b.r.CreationTimestamp = metav1.NewTime(epoch.Add(offset))
	return b
}

// AttachedTo adds a parentRef to the Gateway gw, in the route's namespace unless
// "namespace/name" is given.
func (b *routeBuilder) AttachedTo(gw string, opts ...func(*gatewayv1.ParentReference)) *routeBuilder {
	ref := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(gw)}
	if n, name, ok := strings.Cut(gw, "/"); ok {
		ref.Namespace, ref.Name = ptr(gatewayv1.Namespace(n)), gatewayv1.ObjectName(name)
	}
	for _, o := range opts {
		o(&ref)
	}
	b.r.Spec.ParentRefs = append(b.r.Spec.ParentRefs, ref)
	return b
}

func section(s string) func(*gatewayv1.ParentReference) {
	return func(r *gatewayv1.ParentReference) { r.SectionName = ptr(gatewayv1.SectionName(s)) }
}
func port(p int32) func(*gatewayv1.ParentReference) {
	return func(r *gatewayv1.ParentReference) { r.Port = ptr(gatewayv1.PortNumber(p)) }
}
func parentKind(group, kind string) func(*gatewayv1.ParentReference) {
	return func(r *gatewayv1.ParentReference) {
		r.Group, r.Kind = ptr(gatewayv1.Group(group)), ptr(gatewayv1.Kind(kind))
	}
}

func (b *routeBuilder) ForHosts(hs ...string) *routeBuilder {
	for _, h := range hs {
		b.r.Spec.Hostnames = append(b.r.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	return b
}

func (b *routeBuilder) With(rules ...*ruleBuilder) *routeBuilder {
	for _, r := range rules {
		b.r.Spec.Rules = append(b.r.Spec.Rules, r.r)
	}
	return b
}

type ruleBuilder struct{ r gatewayv1.HTTPRouteRule }

// aRule is a rule with no matches (everything) and no backends.
func aRule() *ruleBuilder { return &ruleBuilder{} }

// Matching adds an ORed match.
func (b *ruleBuilder) Matching(ms ...*matchBuilder) *ruleBuilder {
	for _, m := range ms {
		b.r.Matches = append(b.r.Matches, m.m)
	}
	return b
}

// PathPrefix, Exact, Method, Header and Query add one condition to the rule's only match.
func (b *ruleBuilder) PathPrefix(p string) *ruleBuilder { b.only().PathPrefix(p); return b }
func (b *ruleBuilder) Exact(p string) *ruleBuilder      { b.only().Exact(p); return b }
func (b *ruleBuilder) Method(m string) *ruleBuilder     { b.only().Method(m); return b }
func (b *ruleBuilder) Header(k, v string) *ruleBuilder  { b.only().Header(k, v); return b }
func (b *ruleBuilder) Query(k, v string) *ruleBuilder   { b.only().Query(k, v); return b }

func (b *ruleBuilder) only() *matchBuilder {
	if len(b.r.Matches) == 0 {
		b.r.Matches = []gatewayv1.HTTPRouteMatch{{}}
	}
	return &matchBuilder{m: b.r.Matches[0], set: func(m gatewayv1.HTTPRouteMatch) { b.r.Matches[0] = m }}
}

func (b *ruleBuilder) Named(n string) *ruleBuilder {
	b.r.Name = ptr(gatewayv1.SectionName(n))
	return b
}

func (b *ruleBuilder) To(backends ...*backendBuilder) *ruleBuilder {
	for _, be := range backends {
		b.r.BackendRefs = append(b.r.BackendRefs, be.b)
	}
	return b
}

func (b *ruleBuilder) WithPolicy(name string) *ruleBuilder {
	return b.WithExtension(PolicyGroup, PolicyKind, name)
}
func (b *ruleBuilder) WithExtension(group, kind, name string) *ruleBuilder {
	b.r.Filters = append(b.r.Filters, gatewayv1.HTTPRouteFilter{
		Type:         gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{Group: gatewayv1.Group(group), Kind: gatewayv1.Kind(kind), Name: gatewayv1.ObjectName(name)},
	})
	return b
}
func (b *ruleBuilder) WithFilter(typ gatewayv1.HTTPRouteFilterType) *ruleBuilder {
	b.r.Filters = append(b.r.Filters, gatewayv1.HTTPRouteFilter{Type: typ})
	return b
}

type matchBuilder struct {
	m   gatewayv1.HTTPRouteMatch
	set func(gatewayv1.HTTPRouteMatch)
}

func aMatch() *matchBuilder { return &matchBuilder{} }

func (b *matchBuilder) save() *matchBuilder {
	if b.set != nil {
		b.set(b.m)
	}
	return b
}
func (b *matchBuilder) path(t gatewayv1.PathMatchType, v string) *matchBuilder {
	b.m.Path = &gatewayv1.HTTPPathMatch{Type: ptr(t), Value: ptr(v)}
	return b.save()
}
func (b *matchBuilder) PathPrefix(p string) *matchBuilder {
	return b.path(gatewayv1.PathMatchPathPrefix, p)
}
func (b *matchBuilder) Exact(p string) *matchBuilder { return b.path(gatewayv1.PathMatchExact, p) }
func (b *matchBuilder) PathRegex(p string) *matchBuilder {
	return b.path(gatewayv1.PathMatchRegularExpression, p)
}
func (b *matchBuilder) Method(m string) *matchBuilder {
	b.m.Method = ptr(gatewayv1.HTTPMethod(m))
	return b.save()
}
func (b *matchBuilder) Header(k, v string) *matchBuilder {
	b.m.Headers = append(b.m.Headers, gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName(k), Value: v})
	return b.save()
}
func (b *matchBuilder) HeaderRegex(k, v string) *matchBuilder {
	b.m.Headers = append(b.m.Headers, gatewayv1.HTTPHeaderMatch{
		Type: ptr(gatewayv1.HeaderMatchRegularExpression), Name: gatewayv1.HTTPHeaderName(k), Value: v,
	})
	return b.save()
}
func (b *matchBuilder) Query(k, v string) *matchBuilder {
	b.m.QueryParams = append(b.m.QueryParams, gatewayv1.HTTPQueryParamMatch{Name: gatewayv1.HTTPHeaderName(k), Value: v})
	return b.save()
}
func (b *matchBuilder) QueryRegex(k, v string) *matchBuilder {
	b.m.QueryParams = append(b.m.QueryParams, gatewayv1.HTTPQueryParamMatch{
		Type: ptr(gatewayv1.QueryParamMatchRegularExpression), Name: gatewayv1.HTTPHeaderName(k), Value: v,
	})
	return b.save()
}

type backendBuilder struct{ b gatewayv1.HTTPBackendRef }

func service(name string, p int32) *backendBuilder {
	return &backendBuilder{b: gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
		Name: gatewayv1.ObjectName(name), Port: ptr(gatewayv1.PortNumber(p)),
	}}}}
}
func (b *backendBuilder) InNamespace(n string) *backendBuilder {
	b.b.Namespace = ptr(gatewayv1.Namespace(n))
	return b
}
func (b *backendBuilder) Weighted(w int32) *backendBuilder { b.b.Weight = ptr(w); return b }
func (b *backendBuilder) OfKind(group, kind string) *backendBuilder {
	b.b.Group, b.b.Kind = ptr(gatewayv1.Group(group)), ptr(gatewayv1.Kind(kind))
	return b
}
func (b *backendBuilder) WithoutPort() *backendBuilder { b.b.Port = nil; return b }
func (b *backendBuilder) WithPort(p int32) *backendBuilder {
	b.b.Port = ptr(gatewayv1.PortNumber(p))
	return b
}
func (b *backendBuilder) WithFilter(typ gatewayv1.HTTPRouteFilterType) *backendBuilder {
	b.b.Filters = append(b.b.Filters, gatewayv1.HTTPRouteFilter{Type: typ})
	return b
}

// grantServicesIn lets HTTPRoutes in from reference Services in to (all of them, or the
// named one).
func grantServicesIn(to, from string, name ...string) *gatewayv1.ReferenceGrant {
	return grant(to, "HTTPRoute", from, "Service", name...)
}

// poolRef is a backendRef to the InferencePool name, without a port.
func poolRef(name string) *backendBuilder {
	return service(name, 0).WithoutPort().OfKind(PoolGroup, PoolKind)
}

// grantPoolsIn lets HTTPRoutes in from reference InferencePools in to.
func grantPoolsIn(to, from string) *gatewayv1.ReferenceGrant {
	g := grant(to, "HTTPRoute", from, PoolKind)
	g.Spec.To[0].Group = PoolGroup
	return g
}

// grantSecretsIn lets Gateways in from reference Secrets in to (all of them, or the
// named one).
func grantSecretsIn(to, from string, name ...string) *gatewayv1.ReferenceGrant {
	return grant(to, "Gateway", from, "Secret", name...)
}

// grant is a ReferenceGrant in namespace to letting fromKind objects (of the Gateway
// API group) in namespace from reference core toKind objects: all of them, or the named
// one.
func grant(to, fromKind, from, toKind string, name ...string) *gatewayv1.ReferenceGrant {
	g := &gatewayv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: to, Name: "grant"},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: gatewayv1.Kind(fromKind), Namespace: gatewayv1.Namespace(from)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: gatewayv1.Kind(toKind)}},
		},
	}
	if len(name) > 0 {
		g.Spec.To[0].Name = ptr(gatewayv1.ObjectName(name[0]))
	}
	return g
}

// request builds a request: "GET http://host/path?query", then "Header: value" lines.
func request(line string, headers ...string) *http.Request {
	method, target, _ := strings.Cut(line, " ")
	r := httptest.NewRequest(method, target, nil)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		r.Header.Add(k, strings.TrimSpace(v))
	}
	return r
}

// served names the rule that serves r on port of gatewayIP as "namespace/route#index",
// or "404".
func served(t *Table, port int32, r *http.Request) string {
	return servedAt(t, Addr{IP: gatewayIP, Port: port}, r)
}

// servedAt is served on any address.
func servedAt(t *Table, addr Addr, r *http.Request) string {
	m, ok := t.Match(addr, r)
	if !ok {
		return "404"
	}
	return fmt.Sprintf("%s#%d", m.Rule.Route, m.Rule.Index)
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
