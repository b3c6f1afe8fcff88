package routetable

import (
	"slices"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestAttachment(t *testing.T) {
	gw := func() *gatewayBuilder { return aGateway("gw").Listening(onHTTP("web", 80), onHTTP("admin", 81)) }
	chat := func() *routeBuilder { return aRoute("chat").With(aRule()) }
	labelled := namespaceLabels{"team-a": {"gateway": "shared"}, "team-b": {}}
	cases := []struct {
		name string
		objs []any
		port int32
		want string
	}{
		{"parentRef names the Gateway", []any{switchboardClass(), gw(), chat().AttachedTo("gw")}, 80, "default/chat#0"},
		{"no sectionName attaches to every listener", []any{switchboardClass(), gw(), chat().AttachedTo("gw")}, 81, "default/chat#0"},
		{"class of another controller", []any{aClass("switchboard", "example.com/other"), gw(), chat().AttachedTo("gw")}, 80, "404"},
		{"gateway of another class", []any{switchboardClass(), gw().OfClass("other"), chat().AttachedTo("gw")}, 80, "404"},
		{"no class at all", []any{gw(), chat().AttachedTo("gw")}, 80, "404"},
		{"parentRef to another Gateway", []any{switchboardClass(), gw(), chat().AttachedTo("other")}, 80, "404"},
		{"no parentRef", []any{switchboardClass(), gw(), chat()}, 80, "404"},
		{"sectionName equals listener", []any{switchboardClass(), gw(), chat().AttachedTo("gw", section("web"))}, 80, "default/chat#0"},
		{"sectionName names the other listener", []any{switchboardClass(), gw(), chat().AttachedTo("gw", section("admin"))}, 80, "404"},
		{"sectionName names no listener", []any{switchboardClass(), gw(), chat().AttachedTo("gw", section("nope"))}, 80, "404"},
		{"port equals listener", []any{switchboardClass(), gw(), chat().AttachedTo("gw", port(81))}, 81, "default/chat#0"},
		{"port of another listener", []any{switchboardClass(), gw(), chat().AttachedTo("gw", port(81))}, 80, "404"},
		{"sectionName and port both match", []any{switchboardClass(), gw(), chat().AttachedTo("gw", section("web"), port(80))}, 80, "default/chat#0"},
		{"sectionName matches, port does not", []any{switchboardClass(), gw(), chat().AttachedTo("gw", section("web"), port(81))}, 80, "404"},
		{"explicit Gateway group and kind", []any{switchboardClass(), gw(), chat().AttachedTo("gw", parentKind(gatewayv1.GroupName, "Gateway"))}, 80, "default/chat#0"},
		{"parentRef of another kind", []any{switchboardClass(), gw(), chat().AttachedTo("gw", parentKind(gatewayv1.GroupName, "ListenerSet"))}, 80, "404"},
		{"parentRef of another group", []any{switchboardClass(), gw(), chat().AttachedTo("gw", parentKind("example.com", "Gateway"))}, 80, "404"},
		{"route in another namespace, ref without namespace", []any{switchboardClass(), gw(), chat().InNamespace("team-a").AttachedTo("gw")}, 80, "404"},
		{"Same (default) refuses other namespaces", []any{switchboardClass(), gw(), chat().InNamespace("team-a").AttachedTo("default/gw")}, 80, "404"},
		{"All admits other namespaces", []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80).FromAllNamespaces()), chat().InNamespace("team-a").AttachedTo("default/gw")}, 80, "team-a/chat#0"},
		{"Selector admits a labelled namespace", []any{switchboardClass(), labelled, aGateway("gw").Listening(onHTTP("web", 80).FromNamespacesLabelled("gateway", "shared")), chat().InNamespace("team-a").AttachedTo("default/gw")}, 80, "team-a/chat#0"},
		{"Selector refuses an unlabelled namespace", []any{switchboardClass(), labelled, aGateway("gw").Listening(onHTTP("web", 80).FromNamespacesLabelled("gateway", "shared")), chat().InNamespace("team-b").AttachedTo("default/gw")}, 80, "404"},
		{"Selector refuses the Gateway's own unlabelled namespace", []any{switchboardClass(), labelled, aGateway("gw").Listening(onHTTP("web", 80).FromNamespacesLabelled("gateway", "shared")), chat().AttachedTo("gw")}, 80, "404"},
		{"Selector without NamespaceLabels matches nothing", []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80).FromNamespacesLabelled("gateway", "shared")), chat().InNamespace("team-a").AttachedTo("default/gw")}, 80, "404"},
		{"None refuses even the same namespace", []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80).FromNoNamespaces()), chat().AttachedTo("gw")}, 80, "404"},
		{"kinds listing HTTPRoute", []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80).AllowingKinds("GRPCRoute", "HTTPRoute")), chat().AttachedTo("gw")}, 80, "default/chat#0"},
		{"kinds without HTTPRoute", []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80).AllowingKinds("GRPCRoute")), chat().AttachedTo("gw")}, 80, "404"},
		{"Gateway in another namespace, ref with namespace", []any{switchboardClass(), aGateway("gw").InNamespace("infra").Listening(onHTTP("web", 80).FromAllNamespaces()), chat().AttachedTo("infra/gw")}, 80, "default/chat#0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tbl := build(t, tc.objs...)
			if got := served(tbl, tc.port, request("GET http://example.com/")); got != tc.want {
				t.Errorf("served %s, want %s", got, tc.want)
			}
		})
	}
}

func TestListenersAndPorts(t *testing.T) {
	tbl := build(t, switchboardClass(), aClass("other", "example.com/other"),
		aGateway("b").At("127.0.0.2").Listening(onHTTP("web", 8080), onHTTP("api", 80).ForHost("API.example.com")),
		aGateway("a").Listening(onHTTP("web", 80), onHTTPS("tls", 443), onHTTP("web", 9999)),
		aGateway("c").OfClass("other").Listening(onHTTP("web", 7000)),
		aRoute("one").AttachedTo("a").AttachedTo("a", section("web")).With(aRule()),
		aRoute("two").AttachedTo("a").With(aRule()),
		aRoute("three").AttachedTo("b", section("api")).ForHosts("other.example.net").With(aRule()),
	)
	want := []Listener{
		{Gateway: nn("default", "a"), Name: "web", Port: 80, AttachedRoutes: 2},
		{Gateway: nn("default", "a"), Name: "tls", Port: 443, AttachedRoutes: 2},
		{Gateway: nn("default", "b"), Name: "api", Port: 80, Hostname: "api.example.com"},
		{Gateway: nn("default", "b"), Name: "web", Port: 8080},
	}
	got := tbl.Listeners()
	if len(got) != len(want) {
		t.Fatalf("Listeners() = %+v, want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		g.TLS = nil // checked below
		if g != want[i] {
			t.Errorf("Listeners()[%d] = %+v, want %+v", i, got[i], want[i])
		}
		if https := want[i].Name == "tls"; (got[i].TLS != nil) != https {
			t.Errorf("Listeners()[%d].TLS = %+v, want it set only for the HTTPS listener", i, got[i].TLS)
		}
	}
	// The HTTPS listener has no certificate: it takes routes, but its port is not served.
	if tls := got[1].TLS; tls.Unresolved != gatewayv1.ListenerReasonInvalidCertificateRef || len(tls.Certificates) != 0 {
		t.Errorf("HTTPS listener without tls: %+v, want no certificates and InvalidCertificateRef", tls)
	}
	wantAddrs := []Addr{{IP: "127.0.0.1", Port: 80}, {IP: "127.0.0.2", Port: 80}, {IP: "127.0.0.2", Port: 8080}}
	if addrs := tbl.Addrs(); !slices.Equal(addrs, wantAddrs) {
		t.Errorf("Addrs() = %v, want %v", addrs, wantAddrs)
	}
	got[0].Port = 1
	if tbl.Listeners()[0].Port != 80 {
		t.Error("Listeners() shares its slice with the table")
	}
}

func TestEmptyTable(t *testing.T) {
	for name, tbl := range map[string]*Table{"Build(Input{})": Build(Input{}), "nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			if got := served(tbl, 80, request("GET http://example.com/")); got != "404" {
				t.Errorf("served %s, want 404", got)
			}
			if len(tbl.Listeners()) != 0 || len(tbl.Addrs()) != 0 {
				t.Errorf("Listeners() = %v, Addrs() = %v, want none", tbl.Listeners(), tbl.Addrs())
			}
		})
	}
	tbl := build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80)))
	if got := served(tbl, 80, request("GET http://example.com/")); got != "404" {
		t.Errorf("listener without routes served %s, want 404", got)
	}
	if got := served(tbl, 81, request("GET http://example.com/")); got != "404" {
		t.Errorf("unknown port served %s, want 404", got)
	}
}
