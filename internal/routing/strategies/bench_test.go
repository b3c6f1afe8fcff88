package strategies_test

import (
	"fmt"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
)

// BenchmarkRoute measures one whole decision (candidates, algorithm, reservation and
// release) per strategy and fleet size, serially and from parallel goroutines. Each
// goroutine routes its requests one after another in one RoutingContext of its own, so
// that the allocations reported are the decision's.
func BenchmarkRoute(b *testing.B) {
	sizes := []int{10, 100, 1000, 10000}
	fleets := make(map[int]*routingtest.Fleet, len(sizes))
	for _, n := range sizes {
		fleets[n] = routingtest.NewFleet("llama", n)
	}
	// scraped gives every pod of fleet its metrics, scraped now: before each case, as
	// the whole benchmark may run for longer than metrics stay fresh
	// (routingtest.StaleAfter), and a case measured on stale metrics would time the
	// fallback that routes without them.
	scraped := func(fleet *routingtest.Fleet, n int) {
		for i := range n {
			fleet.SetMetrics(i, endpoint.Metrics{KVCacheUsage: float64(i%100) / 100, Running: float64(i % 7),
				TTFT: endpoint.Histogram{Count: 10, Sum: 1}, TPOT: endpoint.Histogram{Count: 100, Sum: 2},
				GenerationTokens: float64(i),
				Profile: endpoint.Profile{PrefillPerToken: 1e-4, Service: 1, DecodePerToken: 0.02, Slots: 8,
					PrefilledTokens: 1e6, Requests: 1e3, Throughput: float64(i%50) * 10, ThroughputKnown: true}})
		}
	}
	prompt := fmt.Sprintf("%04000d", 42) // a 4 KB prompt
	// Requests of sessions of their own, in turn, so that concurrent decisions of the
	// session-affinity strategy touch the sessions a real workload would.
	reqs := make([]routing.Request, 256)
	for i := range reqs {
		reqs[i] = routing.Request{Prompt: prompt, PromptTokens: 1000, MaxTokens: 128,
			Headers: map[string][]string{"X-Session-Id": {fmt.Sprintf("s%d", i)}}}
	}
	for _, strategy := range allStrategies {
		for _, n := range sizes {
			fleet := fleets[n]
			// The gateway's source of randomness, lock-free per thread: a seeded one, behind
			// a mutex, would be a hot lock of the benchmark's own.
			router, err := newRegistryDrawing(fleet, routing.DefaultRandom).Router(specFor(strategy), "", strategies.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			route := func(rc *routing.RoutingContext, i int) {
				fleet.InitContext(rc, reqs[i%len(reqs)])
				router.Route(rc)
				target, err := rc.TryResult()
				if err != nil {
					b.Fatal(err)
				}
				target.Release(1)
			}
			name := fmt.Sprintf("%s/endpoints=%d", strategy, n)
			scraped(fleet, n)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var rc routing.RoutingContext // the caller's, as a gateway request's
				for i := 0; b.Loop(); i++ {
					route(&rc, i)
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					var rc routing.RoutingContext
					for i := 0; pb.Next(); i++ {
						route(&rc, i)
					}
				})
			})
		}
	}
}
