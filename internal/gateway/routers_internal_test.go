package gateway

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// emptyView returns a gateway cache view with no objects.
func emptyView() *cache.Gateway {
	return &cache.Gateway{
		Reader:          cache.New().Reader,
		Policies:        new(cache.Store[*v1alpha1.RoutingPolicy]),
		Services:        new(cache.Store[cache.Service]),
		Routes:          new(cache.Store[*gatewayv1.HTTPRoute]),
		Gateways:        new(cache.Store[*gatewayv1.Gateway]),
		GatewayClasses:  new(cache.Store[*gatewayv1.GatewayClass]),
		ReferenceGrants: new(cache.Store[*gatewayv1.ReferenceGrant]),
		Namespaces:      new(cache.Store[map[string]string]),
		Certificates:    new(cache.Store[routetable.Certificate]),
	}
}

// sessionPolicy returns a session-affinity policy of uid at generation reading header.
func sessionPolicy(uid types.UID, generation int64, header string) *v1alpha1.RoutingPolicy {
	return &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rp", UID: uid, Generation: generation},
		Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategySessionAffinity,
			SessionAffinity: &v1alpha1.SessionAffinityConfig{Header: new(header), TTL: &metav1.Duration{Duration: time.Minute}}},
	}
}

func TestRoutersFollowPolicyIdentityAndSettings(t *testing.T) {
	g := New(emptyView(), Options{})
	routerOf := func(p *v1alpha1.RoutingPolicy) any {
		t.Helper()
		r, _, err := g.router(p, "")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	count := func() int {
		n := 0
		g.routers.Range(func(any, any) bool { n++; return true })
		return n
	}

	first := routerOf(sessionPolicy("uid-1", 1, "x-a"))
	if again := routerOf(sessionPolicy("uid-1", 1, "x-a")); again != first {
		t.Error("the same generation got another router")
	}
	// A new generation that leaves the routing settings alone (a retry or outlier
	// change) keeps the router and what it learnt; the old generation's entry goes.
	retried := sessionPolicy("uid-1", 2, "x-a")
	retried.Spec.Retry = &v1alpha1.RetryConfig{Attempts: new(int32(1))}
	if kept := routerOf(retried); kept != first {
		t.Error("a generation that changed no routing setting lost its router")
	}
	if n := count(); n != 1 {
		t.Errorf("%d routers after the new generation, want 1", n)
	}
	// A request still reading generation 1 must not take generation 2's router away, nor
	// leave a router of its own behind; with the same settings it shares generation 2's.
	if stale := routerOf(sessionPolicy("uid-1", 1, "x-a")); stale != first {
		t.Error("a request of an older generation with the same settings got another router")
	}
	if _, ok := g.routers.Load(routerKey{uid: "uid-1", generation: 2, strategy: v1alpha1.StrategySessionAffinity}); !ok {
		t.Error("a request of an older generation evicted the newer generation's router")
	}
	if n := count(); n != 1 {
		t.Errorf("%d routers after a request of an older generation, want 1", n)
	}
	// A generation that changes the settings gets a new router.
	changed := routerOf(sessionPolicy("uid-1", 3, "x-b"))
	if changed == first {
		t.Error("a generation with another session header kept the old router")
	}
	// Deleted and created again under its name: generation 1 again, another UID.
	recreated := routerOf(sessionPolicy("uid-2", 1, "x-c"))
	if recreated == first || recreated == changed {
		t.Error("a policy created again under a deleted one's name got the deleted one's router")
	}
	// Deleting a policy forgets its routers.
	g.pruneRouters([]*v1alpha1.RoutingPolicy{sessionPolicy("uid-2", 1, "x-c")})
	g.routers.Range(func(k, _ any) bool {
		if k.(routerKey).uid == "uid-1" {
			t.Errorf("router %+v of a deleted policy kept", k)
		}
		return true
	})
	if n := count(); n != 1 {
		t.Errorf("%d routers after the prune, want the live policy's 1", n)
	}
}

func TestUnknownRequestedStrategyIsTheClientsError(t *testing.T) {
	g := New(emptyView(), Options{})
	p := sessionPolicy("uid", 1, "x-a")
	p.Spec.AllowStrategyOverride = new(true)
	_, _, err := g.router(p, "fastest")
	if e, ok := err.(*Error); !ok || e.Status != 400 {
		t.Fatalf("router with an unknown requested strategy: %v, want a 400 Error", err)
	}
	if _, s, err := g.router(p, string(v1alpha1.StrategyRandom)); err != nil || s != v1alpha1.StrategyRandom {
		t.Errorf("a known requested strategy: %s, %v; want random", s, err)
	}
	p.Spec.AllowStrategyOverride = nil
	if _, s, err := g.router(p, "fastest"); err != nil || s != v1alpha1.StrategySessionAffinity {
		t.Errorf("a request header where the policy allows no override: %s, %v; want the policy's strategy", s, err)
	}
}

// TestBuiltRoutersSayWhetherTheyReadThePrompt checks that the gateway's routers report
// what their algorithms read, so that the prompt's text is built for prefix-cache
// policies and left out for the others.
func TestBuiltRoutersSayWhetherTheyReadThePrompt(t *testing.T) {
	g := New(emptyView(), Options{})
	for strategy, want := range map[v1alpha1.Strategy]bool{
		v1alpha1.StrategyPrefixCache: true, v1alpha1.StrategyLeastRequest: false, v1alpha1.StrategySessionAffinity: false,
	} {
		p := sessionPolicy(types.UID(strategy), 1, "x-a")
		p.Spec.Strategy = strategy
		r, _, err := g.router(p, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := routing.ReadsPrompt(r); got != want {
			t.Errorf("%s: ReadsPrompt = %v, want %v", strategy, got, want)
		}
	}
}

// TestRouterOfARoutedPolicyAllocatesNothing: finding the router of a policy, or of the
// default strategy, that earlier requests built is part of every decision, which
// allocates nothing.
func TestRouterOfARoutedPolicyAllocatesNothing(t *testing.T) {
	g := New(emptyView(), Options{})
	for _, p := range []*v1alpha1.RoutingPolicy{sessionPolicy("uid-1", 1, "x-a"), nil} {
		if _, _, err := g.router(p, ""); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _, _ = g.router(p, "") }); n != 0 {
			t.Errorf("router(%v) allocates %.0f times, want 0", p != nil, n)
		}
	}
}
