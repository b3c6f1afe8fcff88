package leastkvcache_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastkvcache"
	"github.com/switchboard-llm/switchboard/internal/routing/leastrequest"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// pod describes one test pod: its KV-cache usage (negative: no metrics; stale: metrics
// older than the staleness threshold) and its requests in flight.
type pod struct {
	usage    float64
	stale    bool
	inFlight int
}

const unknown = -1

// contextOver builds a fleet of the described pods and returns a routing context over it.
func contextOver(pods []pod) *routing.RoutingContext {
	fleet := routingtest.NewFleet("llama", len(pods))
	for i, p := range pods {
		fleet.Reserve(i, p.inFlight)
		if p.usage == unknown {
			continue
		}
		m := endpoint.Metrics{KVCacheUsage: p.usage}
		if p.stale {
			m.ScrapedAt = time.Now().Add(-2 * routingtest.StaleAfter)
		}
		fleet.SetMetrics(i, m)
	}
	return fleet.Context(routing.Request{})
}

func TestPick(t *testing.T) {
	tests := []struct {
		name    string
		pods    []pod
		want    []int // acceptable indices; every one of them must come up
		wantErr error
	}{
		{name: "lowest usage", pods: []pod{{usage: 0.5}, {usage: 0.2}, {usage: 0.9}}, want: []int{1}},
		{name: "usage beats in-flight", pods: []pod{{usage: 0.3, inFlight: 9}, {usage: 0.4}}, want: []int{0}},
		{name: "equal usage: fewer in flight", pods: []pod{{usage: 0.3, inFlight: 2}, {usage: 0.3, inFlight: 1}, {usage: 0.5}}, want: []int{1}},
		{name: "full tie: random", pods: []pod{{usage: 0.3, inFlight: 1}, {usage: 0.3, inFlight: 1}, {usage: 0.1, inFlight: 0, stale: true}}, want: []int{0, 1}},
		{name: "idle ties: random", pods: []pod{{usage: 0.3}, {usage: 0.5}, {usage: 0.3}}, want: []int{0, 2}},
		{name: "a lower usage with requests in flight projected above", pods: []pod{{usage: 0.3, inFlight: 2}, {usage: 0.305}}, want: []int{1}},
		{name: "unknown never picked", pods: []pod{{usage: unknown}, {usage: 0.99}, {usage: 0, stale: true}}, want: []int{1}},
		{name: "all missing", pods: []pod{{usage: unknown}, {usage: unknown}}, wantErr: routing.ErrUndecided},
		{name: "all stale", pods: []pod{{usage: 0.1, stale: true}, {usage: 0.2, stale: true}}, wantErr: routing.ErrUndecided},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := contextOver(tt.pods)
			cands := routingtest.Candidates(rc)
			r := leastkvcache.New(routingtest.SeededRandom(1))
			e := routing.Eligibility{StaleAfter: routingtest.StaleAfter}
			seen, seenPod := map[int]bool{}, map[int]bool{}
			for range 100 {
				i, err := r.Pick(rc, cands)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("Pick error = %v, want %v", err, tt.wantErr)
					}
					if i, _, ok := r.PickPod(rc, e); ok {
						t.Fatalf("PickPod = %d, want it to decline where Pick cannot decide", i)
					}
					return
				}
				if err != nil || !slices.Contains(tt.want, i) {
					t.Fatalf("Pick = %d, %v; want one of %v", i, err, tt.want)
				}
				seen[i] = true
				i, n, ok := r.PickPod(rc, e)
				if !ok || !slices.Contains(tt.want, i) || n != int64(tt.pods[i].inFlight) {
					t.Fatalf("PickPod = %d, %d, %t; want one of %v with its count", i, n, ok, tt.want)
				}
				seenPod[i] = true
			}
			if len(seen) != len(tt.want) || len(seenPod) != len(tt.want) {
				t.Errorf("Pick picked %v, PickPod %v over 100 decisions, want each of %v", seen, seenPod, tt.want)
			}
		})
	}
}

func TestScore(t *testing.T) {
	rc := contextOver([]pod{{usage: 0.25}, {usage: unknown}, {usage: 1}, {usage: 0.1, stale: true}, {usage: 0}})
	scores := make([]float64, 5)
	if err := leastkvcache.New(routingtest.SeededRandom(1)).Score(rc, routingtest.Candidates(rc), scores); err != nil {
		t.Fatalf("Score: %v", err)
	}
	if want := []float64{0.75, -1, 0, -1, 1}; !slices.Equal(scores, want) {
		t.Errorf("scores = %v, want %v (free fraction; unknown below every known)", scores, want)
	}

	rc = contextOver([]pod{{usage: unknown}, {usage: 0.5, stale: true}})
	err := leastkvcache.New(routingtest.SeededRandom(1)).Score(rc, routingtest.Candidates(rc), scores[:2])
	if !errors.Is(err, routing.ErrUndecided) {
		t.Errorf("Score with no fresh metrics: error = %v, want %v", err, routing.ErrUndecided)
	}
}

func TestRoute(t *testing.T) {
	opts := routingtest.Options()
	opts.Fallback = leastrequest.New(routingtest.SeededRandom(2))
	tests := []struct {
		name    string
		pods    []pod
		wantPod string
	}{
		{name: "least used", pods: []pod{{usage: 0.6}, {usage: 0.3}, {usage: 0.5}}, wantPod: "p0001"},
		{name: "all unknown: the fallback decides", pods: []pod{{usage: unknown, inFlight: 1}, {usage: 0.1, stale: true, inFlight: 1}, {usage: unknown}}, wantPod: "p0002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := contextOver(tt.pods)
			target := routingtest.Route(t, routing.NewRouter(leastkvcache.New(routingtest.SeededRandom(1)), opts), rc)
			defer target.Release(0)
			if target.Pod.Key.Name != tt.wantPod {
				t.Errorf("routed to %s, want %s", target.Pod.Key.Name, tt.wantPod)
			}
		})
	}
}

// TestBurstBetweenScrapesSpreads routes a burst that arrives before the next scrape: the
// requests in flight count towards each engine's projected usage, so the burst spreads
// instead of piling onto the engine that looked emptiest at the last scrape.
func TestBurstBetweenScrapesSpreads(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	for i, usage := range []float64{0.10, 0.11, 0.12} {
		fleet.SetMetrics(i, endpoint.Metrics{KVCacheUsage: usage, BlockSize: 16, NumGPUBlocks: 1000})
	}
	router := routing.NewRouter(leastkvcache.New(routingtest.SeededRandom(1)), routingtest.Options())
	for range 30 {
		// 160 prompt tokens: 10 blocks, 1% of each engine's cache per request.
		rc := fleet.Context(routing.Request{PromptTokens: 160})
		routingtest.Route(t, router, rc)
	}
	for i := range 3 {
		if n := fleet.Pod(i).Load().InFlight(); n < 8 || n > 12 {
			t.Errorf("pod %d has %d of 30 requests, want 8 to 12 (usage 10%%, 11%%, 12%% plus 1%% per request)", i, n)
		}
	}
}

func TestScoreCellsIsScore(t *testing.T) {
	routingtest.CheckScoreCellsIsScore(t, leastkvcache.New(routingtest.SeededRandom(1)), nil)
}

// TestPickPodIsPick checks PickPod against Pick over random fleets and limits, whose
// pods have requests in flight or none and KV caches of one geometry, of another or of
// none reported.
func TestPickPodIsPick(t *testing.T) {
	routingtest.CheckPickPodIsPick(t, func(*routingtest.Fleet, *rand.Rand) routing.PodPicker {
		return leastkvcache.New(routingtest.FirstTie)
	})
}
