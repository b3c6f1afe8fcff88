package routetable

import (
	"net/http"
	"slices"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestHostnames(t *testing.T) {
	cases := []struct {
		name     string
		listener string   // listener hostname, "" for any
		route    []string // route hostnames
		host     string   // request Host header
		want     bool
	}{
		{"any listener, any route", "", nil, "anything.test", true},
		{"exact listener", "a.example.com", nil, "a.example.com", true},
		{"exact listener ignores the port", "a.example.com", nil, "a.example.com:8080", true},
		{"exact listener ignores case", "a.example.com", nil, "A.Example.COM", true},
		{"exact listener ignores a trailing dot", "a.example.com", nil, "a.example.com.", true},
		{"exact listener, other host", "a.example.com", nil, "b.example.com", false},
		{"wildcard listener, one label", "*.example.com", nil, "a.example.com", true},
		{"wildcard listener, two labels", "*.example.com", nil, "x.a.example.com", true},
		{"wildcard listener, bare domain", "*.example.com", nil, "example.com", false},
		{"wildcard listener, other domain", "*.example.com", nil, "a.example.net", false},
		{"route host under any listener", "", []string{"a.example.com"}, "a.example.com", true},
		{"route host ignores case", "", []string{"A.Example.com"}, "a.EXAMPLE.com", true},
		{"route host, other host", "", []string{"a.example.com"}, "b.example.com", false},
		{"one of several route hosts", "", []string{"a.example.com", "b.example.com"}, "b.example.com", true},
		{"route wildcard", "", []string{"*.example.com"}, "x.y.example.com", true},
		{"route wildcard, bare domain", "", []string{"*.example.com"}, "example.com", false},
		{"route host inside listener wildcard", "*.example.com", []string{"a.example.com"}, "a.example.com", true},
		{"route host inside listener wildcard, other host", "*.example.com", []string{"a.example.com"}, "b.example.com", false},
		{"route host outside listener wildcard is ignored", "*.example.com", []string{"a.example.com", "b.example.net"}, "b.example.net", false},
		{"route wildcard covers listener host", "a.example.com", []string{"*.example.com"}, "a.example.com", true},
		{"route wildcard narrowed to listener host", "a.example.com", []string{"*.example.com"}, "b.example.com", false},
		{"narrower route wildcard", "*.example.com", []string{"*.a.example.com"}, "x.a.example.com", true},
		{"narrower route wildcard, sibling", "*.example.com", []string{"*.a.example.com"}, "x.b.example.com", false},
		{"narrower listener wildcard", "*.a.example.com", []string{"*.example.com"}, "x.a.example.com", true},
		{"narrower listener wildcard, sibling", "*.a.example.com", []string{"*.example.com"}, "x.b.example.com", false},
		{"disjoint hosts do not attach", "a.example.com", []string{"b.example.com"}, "a.example.com", false},
		{"IPv6 literal under any listener", "", nil, "[::1]:80", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := onHTTP("web", 80)
			if tc.listener != "" {
				l.ForHost(tc.listener)
			}
			tbl := build(t, switchboardClass(), aGateway("gw").Listening(l),
				aRoute("r").AttachedTo("gw").ForHosts(tc.route...).With(aRule()))
			r := request("GET http://placeholder/")
			r.Host = tc.host
			if got := served(tbl, 80, r) != "404"; got != tc.want {
				t.Errorf("served = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestListenerIsolation(t *testing.T) {
	tbl := build(t, switchboardClass(),
		aGateway("gw").Listening(onHTTP("a", 80).ForHost("a.example.com"), onHTTP("wild", 80).ForHost("*.example.com"), onHTTP("any", 80)),
		aRoute("for-a").AttachedTo("gw", section("a")).With(aRule().PathPrefix("/only")),
		aRoute("for-wild").AttachedTo("gw", section("wild")).With(aRule()),
		aRoute("for-any").AttachedTo("gw", section("any")).With(aRule()),
	)
	for _, tc := range []struct{ url, want string }{
		{"http://a.example.com/only", "default/for-a#0"},
		{"http://a.example.com/other", "404"}, // the most specific listener owns a.example.com
		{"http://b.example.com/other", "default/for-wild#0"},
		{"http://example.com/", "default/for-any#0"},
	} {
		if got := served(tbl, 80, request("GET "+tc.url)); got != tc.want {
			t.Errorf("GET %s served %s, want %s", tc.url, got, tc.want)
		}
	}
}

func TestGatewaysAreIsolated(t *testing.T) {
	tbl := build(t, switchboardClass(),
		aGateway("one").At("127.0.0.1").Listening(onHTTP("web", 80)),
		aGateway("two").At("127.0.0.2").Listening(onHTTP("web", 80).ForHost("more.specific.example")),
		aRoute("mine").AttachedTo("one").With(aRule().PathPrefix("/v1")),
		aRoute("theirs").AttachedTo("two").ForHosts("more.specific.example").With(aRule().PathPrefix("/v1")),
	)
	for _, tc := range []struct {
		ip, url, want string
	}{
		{"127.0.0.1", "http://more.specific.example/v1", "default/mine#0"},
		{"127.0.0.1", "http://x/v1", "default/mine#0"},
		{"127.0.0.2", "http://more.specific.example/v1", "default/theirs#0"},
		{"127.0.0.2", "http://x/v1", "404"},
	} {
		if got := servedAt(tbl, Addr{IP: tc.ip, Port: 80}, request("GET "+tc.url)); got != tc.want {
			t.Errorf("GET %s on %s served %s, want %s", tc.url, tc.ip, got, tc.want)
		}
	}
}

func TestGatewayAddresses(t *testing.T) {
	tbl := build(t, switchboardClass(),
		aGateway("old").CreatedAt(-time.Hour).Listening(onHTTP("web", 80)),
		aGateway("same-address").Listening(onHTTP("web", 80)),
		aGateway("same-address-other-port").Listening(onHTTP("web", 81)),
		aGateway("wildcard").At("0.0.0.0").Listening(onHTTP("web", 80)),
		aGateway("allocated").At("").Assigned("127.0.1.7").Listening(onHTTP("web", 80)),
		aGateway("pending").At("").Listening(onHTTP("web", 80)),
		aGateway("not-an-ip").At("gw.example.com").Listening(onHTTP("web", 82)),
		aGateway("two-addresses").At("127.0.0.3").At("127.0.0.4").Listening(onHTTP("web", 80)),
		aGateway("hostname-type").At("127.0.0.5").AtHostname("gw.example.com").Listening(onHTTP("web", 80)),
		aRoute("r").AttachedTo("old").AttachedTo("same-address").AttachedTo("allocated").With(aRule()),
	)
	want := map[string]Gateway{
		"old":                     {Addresses: []string{"127.0.0.1"}},
		"same-address":            {Addresses: []string{"127.0.0.1"}, Unserved: gatewayv1.GatewayReasonAddressNotUsable},
		"same-address-other-port": {Addresses: []string{"127.0.0.1"}},
		"wildcard":                {Addresses: []string{"0.0.0.0"}, Unserved: gatewayv1.GatewayReasonAddressNotUsable},
		"allocated":               {Addresses: []string{"127.0.1.7"}},
		"pending":                 {Unserved: gatewayv1.GatewayReasonAddressNotAssigned},
		"not-an-ip":               {Unserved: gatewayv1.GatewayReasonAddressNotUsable},
		"two-addresses":           {Addresses: []string{"127.0.0.3", "127.0.0.4"}},
		"hostname-type":           {Rejected: gatewayv1.GatewayReasonUnsupportedAddress, Unserved: gatewayv1.GatewayReasonInvalid},
	}
	got := tbl.Gateways()
	if len(got) != len(want) {
		t.Fatalf("Gateways() = %+v, want %d", got, len(want))
	}
	for _, g := range got {
		w := want[g.Gateway.Name]
		if !slices.Equal(g.Addresses, w.Addresses) || g.Rejected != w.Rejected || g.Unserved != w.Unserved || (g.Unserved != "") != (g.Message != "") {
			t.Errorf("Gateway %s = %+v, want addresses %q rejected %q unserved %q with a message when unserved",
				g.Gateway.Name, g, w.Addresses, w.Rejected, w.Unserved)
		}
	}
	wantAddrs := []Addr{{IP: "127.0.0.1", Port: 80}, {IP: "127.0.0.1", Port: 81}, {IP: "127.0.0.3", Port: 80}, {IP: "127.0.0.4", Port: 80},
		{IP: "127.0.1.7", Port: 80}}
	if addrs := tbl.Addrs(); !slices.Equal(addrs, wantAddrs) {
		t.Errorf("Addrs() = %v, want %v", addrs, wantAddrs)
	}
	if got := servedAt(tbl, Addr{IP: "127.0.1.7", Port: 80}, request("GET http://x/")); got != "default/r#0" {
		t.Errorf("allocated address served %s, want default/r#0", got)
	}
}

func TestListenerConflicts(t *testing.T) {
	tbl := build(t, switchboardClass(),
		aGateway("gw").Listening(onHTTP("first", 80).ForHost("a.example.com"), onHTTP("again", 80).ForHost("A.example.com"),
			onHTTPS("tls", 443), onHTTP("plain-on-tls-port", 443), onHTTP("other-host", 80).ForHost("b.example.com")),
		aRoute("b").AttachedTo("gw").ForHosts("b.example.com").With(aRule()),
		aRoute("r").AttachedTo("gw").With(aRule()),
	)
	want := map[gatewayv1.SectionName]gatewayv1.ListenerConditionReason{
		"first": gatewayv1.ListenerReasonHostnameConflict, "again": gatewayv1.ListenerReasonHostnameConflict,
		"tls": gatewayv1.ListenerReasonProtocolConflict, "plain-on-tls-port": gatewayv1.ListenerReasonProtocolConflict, "other-host": "",
	}
	for _, l := range tbl.Listeners() {
		if l.Conflicted != want[l.Name] {
			t.Errorf("listener %s Conflicted = %q, want %q", l.Name, l.Conflicted, want[l.Name])
		}
		if l.Conflicted != "" && l.AttachedRoutes != 0 {
			t.Errorf("conflicted listener %s has %d routes attached", l.Name, l.AttachedRoutes)
		}
	}
	if got := served(tbl, 443, request("GET http://a.example.com/")); got != "404" {
		t.Errorf("conflicted listener served %s", got)
	}
	if got := served(tbl, 80, request("GET http://a.example.com/")); got != "404" {
		t.Errorf("conflicting listeners served %s: no winner may be picked", got)
	}
	if got := served(tbl, 80, request("GET http://b.example.com/")); got != "default/b#0" {
		t.Errorf("a listener without conflict served %s, want default/b#0", got)
	}
}

// TestPrecedence checks each Gateway API tie-breaker in order: every case has two
// candidates that both match the request and differ in exactly the criterion named.
func TestPrecedence(t *testing.T) {
	type rt = *routeBuilder
	cases := []struct {
		name   string
		routes []rt
		req    *http.Request
		want   string
	}{
		{"exact host over wildcard host",
			[]rt{aRoute("wild").CreatedAt(-time.Hour).ForHosts("*.example.com").With(aRule()), aRoute("exact").ForHosts("a.example.com").With(aRule())},
			request("GET http://a.example.com/"), "default/exact#0"},
		{"longer wildcard host over shorter",
			[]rt{aRoute("short").CreatedAt(-time.Hour).ForHosts("*.example.com").With(aRule()), aRoute("long").ForHosts("*.a.example.com").With(aRule())},
			request("GET http://x.a.example.com/"), "default/long#0"},
		{"any host loses to a wildcard",
			[]rt{aRoute("any").CreatedAt(-time.Hour).With(aRule()), aRoute("wild").ForHosts("*.example.com").With(aRule())},
			request("GET http://a.example.com/"), "default/wild#0"},
		{"host specificity over path specificity",
			[]rt{aRoute("wild").CreatedAt(-time.Hour).ForHosts("*.example.com").With(aRule().Exact("/v1")), aRoute("exact").ForHosts("a.example.com").With(aRule())},
			request("GET http://a.example.com/v1"), "default/exact#0"},
		{"less specific host still serves what the specific one does not match",
			[]rt{aRoute("wild").ForHosts("*.example.com").With(aRule().Exact("/v1")), aRoute("exact").ForHosts("a.example.com").With(aRule().PathPrefix("/v2"))},
			request("GET http://a.example.com/v1"), "default/wild#0"},
		{"exact path over prefix",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1/chat")), aRoute("b").With(aRule().Exact("/v1/chat"))},
			request("GET http://x/v1/chat"), "default/b#0"},
		{"exact path over longer prefix",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1/chat/")), aRoute("b").With(aRule().Exact("/v1/chat"))},
			request("GET http://x/v1/chat"), "default/b#0"},
		{"regular expression path between exact and prefix",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1/chat")), aRoute("b").With(aRule().Matching(aMatch().PathRegex("/v[0-9]/chat")))},
			request("GET http://x/v1/chat"), "default/b#0"},
		{"longer prefix first",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1")), aRoute("b").With(aRule().PathPrefix("/v1/chat"))},
			request("GET http://x/v1/chat/completions"), "default/b#0"},
		{"longer prefix over method",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1").Method("POST")), aRoute("b").With(aRule().PathPrefix("/v1/chat"))},
			request("POST http://x/v1/chat"), "default/b#0"},
		{"method match first",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1")), aRoute("b").With(aRule().PathPrefix("/v1").Method("POST"))},
			request("POST http://x/v1"), "default/b#0"},
		{"method over headers",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().Header("x-a", "1").Header("x-b", "2")), aRoute("b").With(aRule().Method("POST"))},
			request("POST http://x/", "x-a: 1", "x-b: 2"), "default/b#0"},
		{"more header matches first",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().Header("x-a", "1")), aRoute("b").With(aRule().Header("x-a", "1").Header("x-b", "2"))},
			request("GET http://x/", "x-a: 1", "x-b: 2"), "default/b#0"},
		{"headers over query params",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().Query("q", "1").Query("r", "2")), aRoute("b").With(aRule().Header("x-a", "1"))},
			request("GET http://x/?q=1&r=2", "x-a: 1"), "default/b#0"},
		{"more query param matches first",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().Query("q", "1")), aRoute("b").With(aRule().Query("q", "1").Query("r", "2"))},
			request("GET http://x/?q=1&r=2"), "default/b#0"},
		{"oldest route first",
			[]rt{aRoute("a").With(aRule()), aRoute("b").CreatedAt(-time.Second).With(aRule())},
			request("GET http://x/"), "default/b#0"},
		{"then namespace/name alphabetical, by name",
			[]rt{aRoute("b").With(aRule()), aRoute("a").With(aRule())},
			request("GET http://x/"), "default/a#0"},
		{"then namespace/name alphabetical, by namespace first",
			[]rt{aRoute("a").InNamespace("team-b").AttachedTo("default/gw").With(aRule()), aRoute("z").InNamespace("team-a").AttachedTo("default/gw").With(aRule())},
			request("GET http://x/"), "team-a/z#0"},
		{"then the first rule of the route",
			[]rt{aRoute("a").With(aRule().PathPrefix("/v1"), aRule().PathPrefix("/v1"))},
			request("GET http://x/v1"), "default/a#0"},
		{"a later, more specific rule beats an earlier one",
			[]rt{aRoute("a").With(aRule().PathPrefix("/v1"), aRule().Exact("/v1"))},
			request("GET http://x/v1"), "default/a#1"},
		{"each match of a rule ranks on its own",
			[]rt{aRoute("a").CreatedAt(-time.Hour).With(aRule().PathPrefix("/v1/chat")), aRoute("b").With(aRule().Matching(aMatch().PathPrefix("/"), aMatch().Exact("/v1/chat")))},
			request("GET http://x/v1/chat"), "default/b#0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80).FromAllNamespaces())}
			for _, r := range tc.routes {
				if len(r.r.Spec.ParentRefs) == 0 {
					r.AttachedTo("gw")
				}
				objs = append(objs, r)
			}
			if got := served(build(t, objs...), 80, tc.req); got != tc.want {
				t.Errorf("served %s, want %s", got, tc.want)
			}
			// Input order must not matter.
			for i, j := 2, len(objs)-1; i < j; i, j = i+1, j-1 {
				objs[i], objs[j] = objs[j], objs[i]
			}
			if got := served(build(t, objs...), 80, tc.req); got != tc.want {
				t.Errorf("routes reversed: served %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPathMatching(t *testing.T) {
	cases := []struct {
		match *matchBuilder
		path  string
		want  bool
	}{
		{aMatch().PathPrefix("/v1"), "/v1", true},
		{aMatch().PathPrefix("/v1"), "/v1/", true},
		{aMatch().PathPrefix("/v1"), "/v1/chat", true},
		{aMatch().PathPrefix("/v1"), "/v1x", false},
		{aMatch().PathPrefix("/v1"), "/", false},
		{aMatch().PathPrefix("/v1"), "/V1", false},
		{aMatch().PathPrefix("/v1/"), "/v1", true},
		{aMatch().PathPrefix("/v1/"), "/v1/chat", true},
		{aMatch().PathPrefix("/v1/"), "/v1x", false},
		{aMatch().PathPrefix("/"), "/anything/at/all", true},
		{aMatch().PathPrefix("/v1/chat"), "/v1/chat/completions", true},
		{aMatch().PathPrefix("/v1/chat"), "/v1/chatty", false},
		{aMatch().PathPrefix("no-slash"), "/no-slash", false},
		{aMatch().Exact("/v1"), "/v1", true},
		{aMatch().Exact("/v1"), "/v1/", false},
		{aMatch().Exact("/v1"), "/v1/chat", false},
		{aMatch().Exact("/v1"), "/V1", false},
		{aMatch().PathRegex("/v[0-9]+/models"), "/v12/models", true},
		{aMatch().PathRegex("/v[0-9]+/models"), "/v1/models/x", false},
		{aMatch().PathRegex("/v[0-9]+/models"), "/api/v1/models", false},
		{aMatch().PathRegex("(unclosed"), "/(unclosed", false},
		{aMatch(), "/default/is/prefix/root", true},
	}
	for _, tc := range cases {
		p := "default match"
		if tc.match.m.Path != nil {
			p = string(*tc.match.m.Path.Type) + " " + *tc.match.m.Path.Value
		}
		tbl := build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80)),
			aRoute("r").AttachedTo("gw").With(aRule().Matching(tc.match)))
		if got := served(tbl, 80, request("GET http://x"+tc.path)) != "404"; got != tc.want {
			t.Errorf("%s matching %s = %v, want %v", p, tc.path, got, tc.want)
		}
	}
}

func TestConditions(t *testing.T) {
	cases := []struct {
		name string
		rule *ruleBuilder
		req  *http.Request
		want bool
	}{
		{"no matches matches everything", aRule(), request("DELETE http://x/any/path?q=1"), true},
		{"method", aRule().Method("POST"), request("POST http://x/"), true},
		{"other method", aRule().Method("POST"), request("GET http://x/"), false},
		{"header exact", aRule().Header("X-Model", "llama"), request("GET http://x/", "X-Model: llama"), true},
		{"header name ignores case", aRule().Header("x-model", "llama"), request("GET http://x/", "X-MODEL: llama"), true},
		{"header value is case-sensitive", aRule().Header("x-model", "llama"), request("GET http://x/", "x-model: Llama"), false},
		{"header missing", aRule().Header("x-model", "llama"), request("GET http://x/"), false},
		{"header empty value present", aRule().Header("x-model", ""), request("GET http://x/", "x-model:"), true},
		{"repeated header, first value counts", aRule().Header("x-model", "llama"), request("GET http://x/", "x-model: llama", "x-model: qwen"), true},
		{"repeated header name in match, first entry counts", aRule().Header("x-model", "llama").Header("X-Model", "qwen"), request("GET http://x/", "x-model: llama"), true},
		{"Host header", aRule().Header("Host", "x"), request("GET http://x/"), true},
		{"header regex", aRule().Matching(aMatch().HeaderRegex("x-model", "llama-[0-9]+b")), request("GET http://x/", "x-model: llama-70b"), true},
		{"header regex is anchored", aRule().Matching(aMatch().HeaderRegex("x-model", "llama")), request("GET http://x/", "x-model: tinyllama-1b"), false},
		{"invalid header regex never matches", aRule().Matching(aMatch().HeaderRegex("x-model", "(")), request("GET http://x/", "x-model: ("), false},
		{"invalid match does not disable the others", aRule().Matching(aMatch().HeaderRegex("x-model", "("), aMatch().PathPrefix("/v1")), request("GET http://x/v1"), true},
		{"query exact", aRule().Query("model", "llama"), request("GET http://x/?a=b&model=llama"), true},
		{"query other value", aRule().Query("model", "llama"), request("GET http://x/?model=qwen"), false},
		{"query missing", aRule().Query("model", "llama"), request("GET http://x/?modelx=llama"), false},
		{"query name is case-sensitive", aRule().Query("model", "llama"), request("GET http://x/?Model=llama"), false},
		{"query escaped", aRule().Query("model", "a b/c"), request("GET http://x/?model=a+b%2Fc"), true},
		{"repeated query param, first value counts", aRule().Query("model", "llama"), request("GET http://x/?model=llama&model=qwen"), true},
		{"repeated query param, later value ignored", aRule().Query("model", "qwen"), request("GET http://x/?model=llama&model=qwen"), false},
		{"query regex", aRule().Matching(aMatch().QueryRegex("v", "[0-9]+")), request("GET http://x/?v=42"), true},
		{"conditions are ANDed", aRule().PathPrefix("/v1").Method("POST").Header("x-a", "1").Query("q", "1"), request("POST http://x/v1/chat?q=1", "x-a: 1"), true},
		{"one failed condition fails the match", aRule().PathPrefix("/v1").Method("POST").Header("x-a", "1").Query("q", "1"), request("POST http://x/v1/chat?q=2", "x-a: 1"), false},
		{"matches are ORed, first", aRule().Matching(aMatch().Exact("/a"), aMatch().Method("PUT")), request("GET http://x/a"), true},
		{"matches are ORed, second", aRule().Matching(aMatch().Exact("/a"), aMatch().Method("PUT")), request("PUT http://x/b"), true},
		{"matches are ORed, neither", aRule().Matching(aMatch().Exact("/a"), aMatch().Method("PUT")), request("GET http://x/b"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tbl := build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80)), aRoute("r").AttachedTo("gw").With(tc.rule))
			if got := served(tbl, 80, tc.req) != "404"; got != tc.want {
				t.Errorf("matched = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUnknownMatchTypesNeverMatch(t *testing.T) {
	m := aMatch()
	m.m.Path = &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchType("Glob")), Value: ptr("/*")}
	h := aMatch()
	h.m.Headers = []gatewayv1.HTTPHeaderMatch{{Type: ptr(gatewayv1.HeaderMatchType("Prefix")), Name: "x", Value: "a"}}
	for _, match := range []*matchBuilder{m, h} {
		tbl := build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80)), aRoute("r").AttachedTo("gw").With(aRule().Matching(match)))
		if got := served(tbl, 80, request("GET http://x/*", "x: a")); got != "404" {
			t.Errorf("served %s, want 404", got)
		}
	}
}
