package strategies_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
)

// allStrategies are the strategy names of DESIGN §2, as the CRD enumerates them.
var allStrategies = []v1alpha1.Strategy{
	v1alpha1.StrategyRandom, v1alpha1.StrategyRoundRobin, v1alpha1.StrategyLeastRequest,
	v1alpha1.StrategyLeastKVCache, v1alpha1.StrategyLeastLatency, v1alpha1.StrategyThroughput,
	v1alpha1.StrategyPrefixCache, v1alpha1.StrategySessionAffinity, v1alpha1.StrategyWeighted,
}

// specFor returns a valid policy spec using strategy.
func specFor(strategy v1alpha1.Strategy) *v1alpha1.RoutingPolicySpec {
	spec := &v1alpha1.RoutingPolicySpec{Strategy: strategy}
	if strategy == v1alpha1.StrategyWeighted {
		spec.Scorers = []v1alpha1.Scorer{
			{Name: v1alpha1.StrategyLeastKVCache, Weight: new(int32(2))},
			{Name: v1alpha1.StrategyPrefixCache},
		}
	}
	if strategy == v1alpha1.StrategySessionAffinity {
		spec.SessionAffinity = &v1alpha1.SessionAffinityConfig{TTL: &metav1.Duration{Duration: time.Minute}}
	}
	return spec
}

// newRegistry returns a registry over fleet with seeded randomness.
func newRegistry(fleet *routingtest.Fleet) *strategies.Registry {
	return newRegistryDrawing(fleet, routingtest.SeededRandom(1))
}

// newRegistryDrawing is newRegistry with rnd as the routers' source of randomness.
func newRegistryDrawing(fleet *routingtest.Fleet, rnd routing.Random) *strategies.Registry {
	return strategies.NewRegistry(strategies.Deps{
		Reserver:   cache.Tracker{},
		Admission:  routing.NewAdmission(cache.Tracker{}),
		Pods:       fleet.Cache.Reader,
		StaleAfter: routingtest.StaleAfter,
		Random:     rnd,
	})
}

func TestRegistryKnowsEveryStrategy(t *testing.T) {
	got := newRegistry(routingtest.NewFleet("llama", 1)).Strategies()
	slices.Sort(got)
	want := slices.Clone(allStrategies)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Strategies() = %v, want %v", got, want)
	}
}

// TestEveryStrategyRoutesOnlyToCandidates routes requests with and without metrics, with
// and without a session header, through every strategy; each must settle with a
// reserved candidate, never another endpoint. The candidates are a strict subset of the
// model's endpoints, as for a LoRA adapter loaded on some pods only.
func TestEveryStrategyRoutesOnlyToCandidates(t *testing.T) {
	for _, strategy := range allStrategies {
		t.Run(string(strategy), func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", 8)
			for i := range 4 {
				fleet.SetMetrics(i, endpoint.Metrics{KVCacheUsage: float64(i) / 10, Running: float64(i),
					TTFT: endpoint.Histogram{Count: 1, Sum: 0.1}, TPOT: endpoint.Histogram{Count: 1, Sum: 0.01}})
			}
			router, err := newRegistry(fleet).Router(specFor(strategy), "", strategies.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			instances := cache.NewPodSet(fleet.Pods()[2:6])
			for i := range 50 {
				rc := fleet.Context(routing.Request{Prompt: fmt.Sprintf("%0200d", i%5), PromptTokens: 50})
				rc.Candidates, rc.Cells, rc.Counts = instances.Pods, instances.Hot, instances.Counts
				if i%2 == 0 {
					rc.Headers = map[string][]string{"X-Session-Id": {fmt.Sprint(i % 3)}}
				}
				router.Route(rc)
				target, err := rc.TryResult()
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if !slices.Contains(instances.Pods, target.Pod) {
					t.Fatalf("request %d routed to %s, not a candidate", i, target.Pod.Key)
				}
				target.Release(1)
			}
		})
	}
}

// TestStaleMetricsUseFallback checks that a strategy reading engine metrics defers to
// the policy's fallback when every snapshot is stale.
func TestStaleMetricsUseFallback(t *testing.T) {
	for _, strategy := range []v1alpha1.Strategy{v1alpha1.StrategyLeastKVCache, v1alpha1.StrategyLeastLatency, v1alpha1.StrategyThroughput} {
		t.Run(string(strategy), func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", 3)
			old := time.Now().Add(-time.Hour)
			for i := range 3 {
				// Pod 0 looks best by every metric, but its snapshot is stale like the others.
				fleet.SetMetrics(i, endpoint.Metrics{KVCacheUsage: float64(i) / 10, ScrapedAt: old})
			}
			fleet.Reserve(0, 3)
			fleet.Reserve(1, 1)
			spec := specFor(strategy)
			spec.Fallback = new(v1alpha1.StrategyLeastRequest)
			router, err := newRegistry(fleet).Router(spec, "", strategies.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			rc := fleet.Context(routing.Request{PromptTokens: 10})
			router.Route(rc)
			target, err := rc.TryResult()
			if err != nil {
				t.Fatal(err)
			}
			if target.Pod.Key.Name != "p0002" {
				t.Errorf("routed to %s, want the least-request fallback's p0002", target.Pod.Key.Name)
			}
		})
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := newRegistry(routingtest.NewFleet("llama", 1))
	tests := []struct {
		name string
		spec *v1alpha1.RoutingPolicySpec
	}{
		{"unknown strategy", &v1alpha1.RoutingPolicySpec{Strategy: "fastest"}},
		{"unknown fallback", &v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRandom, Fallback: new(v1alpha1.Strategy("fastest"))}},
		{"weighted without scorers", &v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted}},
		{"weighted in weighted", &v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted,
			Scorers: []v1alpha1.Scorer{{Name: v1alpha1.StrategyWeighted}}}},
		{"bad match ratio", &v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyPrefixCache,
			PrefixCache: &v1alpha1.PrefixCacheConfig{MinMatchRatio: new("lots")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := reg.Router(tt.spec, "", strategies.Limits{}); err == nil {
				t.Error("Router() succeeded, want an error")
			}
		})
	}
}

func TestRouterStrategyOverride(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	fleet.Reserve(0, 2)
	fleet.Reserve(2, 2)
	spec := &v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRandom}
	router, err := newRegistry(fleet).Router(spec, v1alpha1.StrategyLeastRequest, strategies.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		rc := fleet.Context(routing.Request{})
		router.Route(rc)
		target, err := rc.TryResult()
		if err != nil {
			t.Fatal(err)
		}
		if target.Pod.Key.Name != "p0001" {
			t.Fatalf("override to least-request routed to %s, want p0001", target.Pod.Key.Name)
		}
		target.Release(0)
	}
}

func TestRouterLimitsQueue(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	router, err := newRegistry(fleet).Router(specFor(v1alpha1.StrategyLeastRequest), "",
		strategies.Limits{MaxInFlight: 1, MaxQueued: 1})
	if err != nil {
		t.Fatal(err)
	}
	first, queued, rejected := fleet.Context(routing.Request{}), fleet.Context(routing.Request{}), fleet.Context(routing.Request{})
	for _, rc := range []*routing.RoutingContext{first, queued, rejected} {
		router.Route(rc)
	}
	if _, err := queued.TryResult(); !errors.Is(err, routing.ErrPending) {
		t.Errorf("second request: %v, want it queued", err)
	}
	if _, err := rejected.TryResult(); !errors.Is(err, routing.ErrQueueFull) {
		t.Errorf("third request: %v, want ErrQueueFull", err)
	}
	target, _ := first.TryResult()
	target.Release(0)
	if next, err := queued.TryResult(); err != nil {
		t.Errorf("queued request after a release: %v", err)
	} else {
		next.Release(0)
	}
}

// TestRouterQueueWaitComesFromThePolicy checks that a queued request is rejected after
// the policy's spec.queue.maxWait, else after the gateway's Limits.MaxQueueWait.
func TestRouterQueueWaitComesFromThePolicy(t *testing.T) {
	short := &metav1.Duration{Duration: 10 * time.Millisecond}
	for _, tt := range []struct {
		name   string
		policy *metav1.Duration
		limit  time.Duration
	}{
		{"policy", short, time.Hour},
		{"gateway default", nil, short.Duration},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", 1)
			spec := specFor(v1alpha1.StrategyLeastRequest)
			if tt.policy != nil {
				spec.Queue = &v1alpha1.QueueConfig{MaxWait: tt.policy}
			}
			router, err := newRegistry(fleet).Router(spec, "", strategies.Limits{MaxInFlight: 1, MaxQueued: 1, MaxQueueWait: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			first, queued := fleet.Context(routing.Request{}), fleet.Context(routing.Request{})
			router.Route(first)
			router.Route(queued)
			select {
			case <-queued.Settled():
			case <-time.After(time.Minute): // a bound against hanging, not a timing assertion
				t.Fatalf("queued request still waits after a minute, want it rejected after %v", short.Duration)
			}
			if _, err := queued.TryResult(); !errors.Is(err, routing.ErrQueueTimeout) {
				t.Errorf("queued request: %v, want ErrQueueTimeout", err)
			}
			target, _ := first.TryResult()
			target.Release(0)
		})
	}
}

// TestPrefixBudgetSharedByRouters builds prefix-cache and weighted routers of different
// policies on one budget: together they stay within it however much they learn.
func TestPrefixBudgetSharedByRouters(t *testing.T) {
	const budgetBytes = 256 * prefixcache.BytesPerBlock
	fleet := routingtest.NewFleet("llama", 4)
	budget := prefixcache.NewBudget(budgetBytes)
	reg := strategies.NewRegistry(strategies.Deps{Reserver: cache.Tracker{}, Pods: fleet.Cache.Reader,
		StaleAfter: routingtest.StaleAfter, Random: routingtest.SeededRandom(1), PrefixBudget: budget})
	var routers []routing.Router
	for _, strategy := range []v1alpha1.Strategy{v1alpha1.StrategyPrefixCache, v1alpha1.StrategyWeighted} {
		for range 2 {
			router, err := reg.Router(specFor(strategy), "", strategies.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			routers = append(routers, router)
		}
	}
	for i := range 200 { // 200 prompts of 16 blocks: 12 times the budget
		rc := fleet.Context(routing.Request{Prompt: fmt.Sprintf("%04d%01020d", i, 0), PromptTokens: 256})
		routingtest.Route(t, routers[i%len(routers)], rc).Release(1)
	}
	if used := budget.Used(); used == 0 || used > budgetBytes {
		t.Errorf("the routers are accounted %d bytes, want some and at most the budget's %d", used, budgetBytes)
	}
}

// TestRoutersSayWhetherTheyReadThePrompt checks routing.ReadsPrompt of the routers the
// registry builds, and that a router that says it does not read the prompt's text
// decides the same with and without it: the gateway leaves the text out for such
// routers.
func TestRoutersSayWhetherTheyReadThePrompt(t *testing.T) {
	type routerCase struct {
		name   string
		spec   *v1alpha1.RoutingPolicySpec
		limits strategies.Limits
		want   bool
	}
	var cases []routerCase
	for _, strategy := range allStrategies {
		reads := strategy == v1alpha1.StrategyPrefixCache || strategy == v1alpha1.StrategyWeighted // its scorers include prefix-cache
		cases = append(cases, routerCase{name: string(strategy), spec: specFor(strategy), want: reads})
	}
	prefixFallback := specFor(v1alpha1.StrategyLeastKVCache)
	prefixFallback.Fallback = new(v1alpha1.StrategyPrefixCache)
	withoutPrefix := specFor(v1alpha1.StrategyWeighted)
	withoutPrefix.Scorers = withoutPrefix.Scorers[:1]
	cases = append(cases,
		routerCase{name: "prefix-cache fallback", spec: prefixFallback, want: true},
		routerCase{name: "weighted without prefix-cache", spec: withoutPrefix},
		routerCase{name: "queued prefix-cache", spec: specFor(v1alpha1.StrategyPrefixCache),
			limits: strategies.Limits{MaxInFlight: 4, MaxQueued: 8}, want: true},
		routerCase{name: "queued least-request", spec: specFor(v1alpha1.StrategyLeastRequest),
			limits: strategies.Limits{MaxInFlight: 4, MaxQueued: 8}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Two identical fleets and registries: one routes requests with their
			// prompts' text, the other the same requests without it.
			var chosen [2][]string
			for run, withText := range []bool{true, false} {
				fleet := routingtest.NewFleet("llama", 6)
				for i := range 3 {
					fleet.SetMetrics(i, endpoint.Metrics{KVCacheUsage: float64(i) / 10, Running: float64(i),
						TTFT: endpoint.Histogram{Count: 1, Sum: 0.1}, TPOT: endpoint.Histogram{Count: 1, Sum: 0.01}})
				}
				router, err := newRegistry(fleet).Router(tc.spec, "", tc.limits)
				if err != nil {
					t.Fatal(err)
				}
				if got := routing.ReadsPrompt(router); got != tc.want {
					t.Fatalf("ReadsPrompt = %v, want %v", got, tc.want)
				}
				var held []*routing.Target
				for i := range 40 {
					req := routing.Request{PromptTokens: 50, Headers: map[string][]string{"X-Session-Id": {fmt.Sprint(i % 4)}}}
					if withText {
						req.Prompt = fmt.Sprintf("%0200d", i%5)
					}
					rc := fleet.Context(req)
					router.Route(rc)
					target, err := rc.TryResult()
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					chosen[run] = append(chosen[run], target.Pod.Key.Name)
					if held = append(held, target); len(held) == 3 { // some load stays on the fleet
						held[0].Release(1)
						held = held[1:]
					}
				}
			}
			if !tc.want && !slices.Equal(chosen[0], chosen[1]) {
				t.Errorf("decisions with the prompt's text %v differ from those without %v", chosen[0], chosen[1])
			}
			if tc.want && slices.Equal(chosen[0], chosen[1]) && tc.spec.Strategy == v1alpha1.StrategyPrefixCache {
				t.Errorf("prefix-cache decided the same with and without the prompt's text: %v", chosen[0])
			}
		})
	}
}
