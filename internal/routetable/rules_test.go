package routetable

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// ruleOf builds a table with one route "chat" in namespace "team" holding rule, and returns
// the compiled Rule that serves every request.
func ruleOf(t *testing.T, rule *ruleBuilder, extra ...any) *Rule {
	t.Helper()
	objs := append([]any{switchboardClass(),
		aGateway("gw").Listening(onHTTP("web", 80).FromAllNamespaces()),
		aRoute("chat").InNamespace("team").AttachedTo("default/gw").With(rule)}, extra...)
	m, ok := build(t, objs...).Match(Addr{IP: gatewayIP, Port: 80}, request("GET http://x/"))
	if !ok {
		t.Fatal("rule did not match")
	}
	return m.Rule
}

func TestPolicyAndFilters(t *testing.T) {
	cases := []struct {
		name        string
		rule        *ruleBuilder
		wantPolicy  *types.NamespacedName
		wantInvalid string
	}{
		{"no filter: default strategy", aRule(), nil, ""},
		{"RoutingPolicy ExtensionRef, in the route's namespace", aRule().WithPolicy("fast"), &types.NamespacedName{Namespace: "team", Name: "fast"}, ""},
		{"ExtensionRef to another kind", aRule().WithExtension(PolicyGroup, "ModelAdapter", "x"),
			nil, `filters[0]: ExtensionRef to inference.switchboard.dev/ModelAdapter "x" is not supported: only inference.switchboard.dev/RoutingPolicy`},
		{"ExtensionRef to another group", aRule().WithExtension("example.com", PolicyKind, "x"),
			nil, `filters[0]: ExtensionRef to example.com/RoutingPolicy "x" is not supported: only inference.switchboard.dev/RoutingPolicy`},
		{"ExtensionRef type without extensionRef", aRule().WithFilter(gatewayv1.HTTPRouteFilterExtensionRef), nil, "filters[0]: ExtensionRef filter without extensionRef"},
		{"unsupported filter type", aRule().WithFilter(gatewayv1.HTTPRouteFilterCORS), nil, "filter type CORS is not supported"},
		{"policy kept, other filter still invalid", aRule().WithPolicy("fast").WithFilter(gatewayv1.HTTPRouteFilterCORS),
			&types.NamespacedName{Namespace: "team", Name: "fast"}, "filter type CORS is not supported"},
		{"two policies", aRule().WithPolicy("a").WithPolicy("b"), &types.NamespacedName{Namespace: "team", Name: "a"}, "filters[1]: more than one RoutingPolicy ExtensionRef filter"},
		{"RequestMirror without requestMirror", aRule().WithFilter(gatewayv1.HTTPRouteFilterRequestMirror), nil,
			"filters[0]: RequestMirror filter without requestMirror"},
		{"per-backend filter without its field", aRule().To(service("engine", 8000).WithFilter(gatewayv1.HTTPRouteFilterRequestHeaderModifier)), nil,
			"backendRefs[0]: RequestHeaderModifier filter without requestHeaderModifier"},
		{"per-backend redirect", aRule().To(service("engine", 8000).WithFilter(gatewayv1.HTTPRouteFilterRequestRedirect)), nil,
			"backendRefs[0].filters[0]: a RequestRedirect filter is not supported on a backendRef, only on its rule; backendRefs[0]: RequestRedirect filter without requestRedirect"},
		{"per-backend RoutingPolicy", aRule().To(service("engine", 8000).WithFilter(gatewayv1.HTTPRouteFilterExtensionRef)), nil,
			"backendRefs[0].filters[0]: a ExtensionRef filter is not supported on a backendRef, only on its rule"},
		{"missing policy", aRule().WithPolicy("gone"), &types.NamespacedName{Namespace: "team", Name: "gone"},
			"RoutingPolicy team/gone referenced by the route does not exist"},
		{"invalid policy", aRule().WithPolicy("broken"), &types.NamespacedName{Namespace: "team", Name: "broken"},
			"RoutingPolicy team/broken is invalid: spec.strategy is unknown"},
	}
	policies := policyStates{"team/fast": nil, "team/a": nil, "team/broken": errors.New("spec.strategy is unknown")}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, tc.rule, policies)
			if !reflect.DeepEqual(r.Policy, tc.wantPolicy) {
				t.Errorf("Policy = %v, want %v", r.Policy, tc.wantPolicy)
			}
			if r.InvalidFilter != tc.wantInvalid {
				t.Errorf("InvalidFilter = %q, want %q", r.InvalidFilter, tc.wantInvalid)
			}
		})
	}
}

func TestBackends(t *testing.T) {
	cases := []struct {
		name         string
		rule         *ruleBuilder
		extra        []any
		want         []Backend
		wantRejected []RejectedBackend
	}{
		{"none", aRule(), nil, nil, nil},
		{"namespace and weight default", aRule().To(service("engine", 8000)), nil,
			[]Backend{{Service: nn("team", "engine"), Port: 8000, Weight: 1}}, nil},
		{"weights kept in order, zero included", aRule().To(service("a", 1).Weighted(3), service("b", 2).Weighted(0)), nil,
			[]Backend{{Service: nn("team", "a"), Port: 1, Weight: 3}, {Service: nn("team", "b"), Port: 2, Weight: 0}}, nil},
		{"explicit core group and Service kind", aRule().To(service("engine", 8000).OfKind("", "Service")), nil,
			[]Backend{{Service: nn("team", "engine"), Port: 8000, Weight: 1}}, nil},
		{"same namespace spelled out", aRule().To(service("engine", 8000).InNamespace("team")), nil,
			[]Backend{{Service: nn("team", "engine"), Port: 8000, Weight: 1}}, nil},
		{"another namespace with a ReferenceGrant", aRule().To(service("engine", 8000).InNamespace("models")),
			[]any{grantServicesIn("models", "team")},
			[]Backend{{Service: nn("models", "engine"), Port: 8000, Weight: 1}}, nil},
		{"another namespace with a grant for that Service", aRule().To(service("engine", 8000).InNamespace("models")),
			[]any{grantServicesIn("models", "team", "engine")},
			[]Backend{{Service: nn("models", "engine"), Port: 8000, Weight: 1}}, nil},
		{"another namespace, grant for another Service", aRule().To(service("engine", 8000).InNamespace("models")),
			[]any{grantServicesIn("models", "team", "other")}, nil,
			[]RejectedBackend{{Kind: "Service", Target: nn("models", "engine"), Weight: 1, Reason: gatewayv1.RouteReasonRefNotPermitted,
				Message: "no ReferenceGrant in namespace models permits HTTPRoutes in team to reference Service engine"}}},
		{"another namespace, grant from another namespace", aRule().To(service("engine", 8000).InNamespace("models")),
			[]any{grantServicesIn("models", "elsewhere")}, nil,
			[]RejectedBackend{{Kind: "Service", Target: nn("models", "engine"), Weight: 1, Reason: gatewayv1.RouteReasonRefNotPermitted,
				Message: "no ReferenceGrant in namespace models permits HTTPRoutes in team to reference Service engine"}}},
		{"a grant for Gateways does not let routes reference Services", aRule().To(service("engine", 8000).InNamespace("models")),
			[]any{grant("models", "Gateway", "team", "Service")}, nil,
			[]RejectedBackend{{Kind: "Service", Target: nn("models", "engine"), Weight: 1, Reason: gatewayv1.RouteReasonRefNotPermitted,
				Message: "no ReferenceGrant in namespace models permits HTTPRoutes in team to reference Service engine"}}},
		{"a grant to Secrets does not let routes reference Services", aRule().To(service("engine", 8000).InNamespace("models")),
			[]any{grant("models", "HTTPRoute", "team", "Secret")}, nil,
			[]RejectedBackend{{Kind: "Service", Target: nn("models", "engine"), Weight: 1, Reason: gatewayv1.RouteReasonRefNotPermitted,
				Message: "no ReferenceGrant in namespace models permits HTTPRoutes in team to reference Service engine"}}},
		{"other kinds are rejected with their weight", aRule().To(service("engine", 8000), service("imp", 8000).OfKind("multicluster.x-k8s.io", "ServiceImport").Weighted(4)), nil,
			[]Backend{{Service: nn("team", "engine"), Port: 8000, Weight: 1}},
			[]RejectedBackend{{Group: "multicluster.x-k8s.io", Kind: "ServiceImport", Target: nn("team", "imp"), Weight: 4, Reason: gatewayv1.RouteReasonInvalidKind,
				Message: "backendRef kind multicluster.x-k8s.io/ServiceImport is not supported: only core Services and inference.networking.k8s.io/InferencePool"}}},
		{"Service without port", aRule().To(service("engine", 0).WithoutPort()), nil, nil,
			[]RejectedBackend{{Kind: "Service", Target: nn("team", "engine"), Weight: 1, Reason: gatewayv1.RouteReasonUnsupportedValue,
				Message: "backendRef to Service team/engine has no port"}}},
		{"missing Service", aRule().To(service("engine", 8000), service("gone", 8000).Weighted(2)), []any{services{"team/engine"}},
			[]Backend{{Service: nn("team", "engine"), Port: 8000, Weight: 1}},
			[]RejectedBackend{{Kind: "Service", Target: nn("team", "gone"), Weight: 2, Reason: gatewayv1.RouteReasonBackendNotFound,
				Message: "Service team/gone not found"}}},
		{"no grant is checked before existence", aRule().To(service("engine", 8000).InNamespace("models")), []any{services{"team/engine"}}, nil,
			[]RejectedBackend{{Kind: "Service", Target: nn("models", "engine"), Weight: 1, Reason: gatewayv1.RouteReasonRefNotPermitted,
				Message: "no ReferenceGrant in namespace models permits HTTPRoutes in team to reference Service engine"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, tc.rule, tc.extra...)
			checkBackends(t, r, tc.want, tc.wantRejected)
		})
	}
}

// TestBackendFilters checks that a backendRef's own filters are compiled onto its
// backend, and only onto it.
func TestBackendFilters(t *testing.T) {
	modified := service("a", 1)
	modified.b.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Backend", Value: "a"}}}}}
	r := ruleOf(t, aRule().To(modified, service("b", 2)), policyStates{})
	if r.InvalidFilter != "" || len(r.Backends) != 2 {
		t.Fatalf("rule = %+v, want two valid backends", r)
	}
	if r.Backends[0].Filters.Empty() || !r.Backends[1].Filters.Empty() || !r.Filters.Empty() {
		t.Fatalf("filters: backend a %v, backend b %v, rule %v; want only backend a's", r.Backends[0].Filters, r.Backends[1].Filters, r.Filters)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Backends[0].Filters.ModifyRequest(req, "")
	if got := req.Header.Get("X-Backend"); got != "a" {
		t.Errorf("backend a's filters set X-Backend = %q, want a", got)
	}
}

func TestRuleIdentity(t *testing.T) {
	tbl := build(t, switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80), onHTTP("alt", 81)),
		aRoute("chat").AttachedTo("gw").With(aRule().Exact("/a"), aRule().Named("completions").Exact("/b")))
	m, ok := tbl.Match(Addr{IP: gatewayIP, Port: 80}, request("GET http://x/b"))
	if !ok {
		t.Fatal("no match")
	}
	r := m.Rule
	want := &Rule{Route: nn("default", "chat"), RouteName: "default/chat", Index: 1, Name: "completions"}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("rule = %+v, want %+v", r, want)
	}
	if m2, _ := tbl.Match(Addr{IP: gatewayIP, Port: 81}, request("GET http://x/b")); m2.Rule != r {
		t.Error("a route attached to two listeners compiles its rules twice; want one shared *Rule")
	}
}

func TestPolicyGroupIsTheAPIGroup(t *testing.T) {
	if PolicyGroup != v1alpha1.GroupVersion.Group {
		t.Errorf("PolicyGroup = %q, want the API group %q", PolicyGroup, v1alpha1.GroupVersion.Group)
	}
}

func TestConcurrentMatch(t *testing.T) {
	tbl := benchTable(t, 20, 5)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				r := benchRequest((g*7+i)%20, i%5)
				if _, ok := tbl.Match(Addr{IP: gatewayIP, Port: 80}, r); !ok {
					t.Errorf("no match for %s", r.URL)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestRuleTimeouts(t *testing.T) {
	rule := aRule().To(service("a", 1))
	rule.r.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: new(gatewayv1.Duration("1m30s")), BackendRequest: new(gatewayv1.Duration("500ms"))}
	r := ruleOf(t, rule, policyStates{})
	if r.RequestTimeout != 90*time.Second || r.BackendTimeout != 500*time.Millisecond || r.InvalidFilter != "" {
		t.Errorf("timeouts = %v, %v (invalid %q), want 1m30s and 500ms", r.RequestTimeout, r.BackendTimeout, r.InvalidFilter)
	}
	rule.r.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: new(gatewayv1.Duration("0s"))}
	if r := ruleOf(t, rule, policyStates{}); r.RequestTimeout != 0 || r.InvalidFilter != "" {
		t.Errorf("timeouts.request 0s = %v (invalid %q), want none", r.RequestTimeout, r.InvalidFilter)
	}
	rule.r.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: new(gatewayv1.Duration("soon"))}
	if r := ruleOf(t, rule, policyStates{}); r.InvalidFilter != `timeouts.request: "soon" is not a duration` {
		t.Errorf("an invalid timeout: InvalidFilter %q", r.InvalidFilter)
	}
}

// checkBackends checks r's usable and rejected backends.
func checkBackends(t *testing.T, r *Rule, want []Backend, wantRejected []RejectedBackend) {
	t.Helper()
	if !reflect.DeepEqual(r.Backends, want) {
		t.Errorf("Backends = %+v, want %+v", r.Backends, want)
	}
	if !reflect.DeepEqual(r.RejectedBackends, wantRejected) {
		t.Errorf("RejectedBackends = %+v, want %+v", r.RejectedBackends, wantRejected)
	}
}

// TestPoolBackends checks that an InferencePool backendRef resolves to the pool's pods
// and port, whatever port it names, within the namespace rules, and makes the rule an
// inference rule routed by the pool's RoutingPolicy unless a filter names another.
func TestPoolBackends(t *testing.T) {
	llm := Pool{Key: nn("team", "llm"), Selector: map[string]string{"app": "llm"}, Ports: []int32{8000}, Policy: nn("team", "llm")}
	tuned := llm
	tuned.Policy = nn("team", "tuned")
	shared := Pool{Key: nn("models", "shared"), Selector: map[string]string{"app": "shared"}, Ports: []int32{9000}, Policy: nn("models", "shared")}
	picked := llm
	picked.Picker = &PickerRef{Kind: "Service", Name: "epp"}
	pickedByAnything := llm
	pickedByAnything.Picker = &PickerRef{Group: "example.com", Kind: "Picker", Name: "epp"}
	valid := policyStates{"team/llm": nil, "team/tuned": nil, "team/fast": nil, "models/shared": nil}
	backend := func(p Pool) []Backend {
		return []Backend{{Service: PoolService(p.Key), Port: p.Port(), Weight: 1, Pool: &p}}
	}
	cases := []struct {
		name         string
		rule         *ruleBuilder
		extra        []any
		want         []Backend
		wantRejected []RejectedBackend
		wantPolicy   *types.NamespacedName
		wantInvalid  string
	}{
		{"a pool of the route's namespace", aRule().To(poolRef("llm")), []any{pools{llm}, valid},
			backend(llm), nil, &llm.Policy, ""},
		{"a backendRef port is not the pods'", aRule().To(poolRef("llm").WithPort(9999)), []any{pools{llm}, valid},
			backend(llm), nil, &llm.Policy, ""},
		{"the pool's annotation names the policy", aRule().To(poolRef("llm")), []any{pools{tuned}, valid},
			backend(tuned), nil, &tuned.Policy, ""},
		{"the rule's own policy comes first", aRule().WithPolicy("fast").To(poolRef("llm")), []any{pools{llm}, valid},
			backend(llm), nil, &types.NamespacedName{Namespace: "team", Name: "fast"}, ""},
		{"a pool without its policy", aRule().To(poolRef("llm")), []any{pools{llm}, policyStates{}},
			backend(llm), nil, &llm.Policy, "RoutingPolicy team/llm referenced by InferencePool team/llm does not exist"},
		{"a missing pool", aRule().To(poolRef("gone")), []any{pools{llm}, valid}, nil,
			[]RejectedBackend{{Group: PoolGroup, Kind: PoolKind, Target: nn("team", "gone"), Weight: 1, Reason: gatewayv1.RouteReasonBackendNotFound,
				Message: "InferencePool team/gone not found"}}, nil, ""},
		{"another namespace without a grant", aRule().To(poolRef("shared").InNamespace("models")), []any{pools{shared}, valid, grantServicesIn("models", "team")}, nil,
			[]RejectedBackend{{Group: PoolGroup, Kind: PoolKind, Target: nn("models", "shared"), Weight: 1, Reason: gatewayv1.RouteReasonRefNotPermitted,
				Message: "no ReferenceGrant in namespace models permits HTTPRoutes in team to reference InferencePool shared"}}, nil, ""},
		{"another namespace with a grant", aRule().To(poolRef("shared").InNamespace("models")), []any{pools{shared}, valid, grantPoolsIn("models", "team")},
			backend(shared), nil, &shared.Policy, ""},
		{"a pool whose endpoint picker Service exists", aRule().To(poolRef("llm")), []any{pools{picked}, valid, services{"team/epp"}},
			backend(picked), nil, &picked.Policy, ""},
		{"a pool whose endpoint picker Service is missing", aRule().To(poolRef("llm")), []any{pools{picked}, valid, services{"models/epp"}}, nil,
			[]RejectedBackend{{Group: PoolGroup, Kind: PoolKind, Target: nn("team", "llm"), Weight: 1, Reason: gatewayv1.RouteReasonBackendNotFound,
				Message: "InferencePool team/llm: endpointPickerRef Service team/epp not found"}}, nil, ""},
		{"a pool whose endpoint picker is not a Service", aRule().To(poolRef("llm")), []any{pools{pickedByAnything}, valid, services{"team/epp"}}, nil,
			[]RejectedBackend{{Group: PoolGroup, Kind: PoolKind, Target: nn("team", "llm"), Weight: 1, Reason: gatewayv1.RouteReasonBackendNotFound,
				Message: "InferencePool team/llm: endpointPickerRef kind example.com/Picker is not supported: only a core Service"}}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, tc.rule, tc.extra...)
			checkBackends(t, r, tc.want, tc.wantRejected)
			if !reflect.DeepEqual(r.Policy, tc.wantPolicy) {
				t.Errorf("Policy = %v, want %v", r.Policy, tc.wantPolicy)
			}
			if r.InvalidFilter != tc.wantInvalid {
				t.Errorf("InvalidFilter = %q, want %q", r.InvalidFilter, tc.wantInvalid)
			}
		})
	}
}
