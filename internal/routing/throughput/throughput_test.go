package throughput_test

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/throughput"
)

// snapshot returns metrics scraped at, with running requests and cumulative token
// counters summing to tokens.
func snapshot(tokens, running float64, at time.Time) endpoint.Metrics {
	return endpoint.Metrics{
		PromptTokens:     tokens / 4,
		GenerationTokens: tokens - tokens/4,
		Running:          running,
		ScrapedAt:        at,
	}
}

// score stores each pod's metrics in fleet (nil: leave as is) and returns r's scores.
func score(t *testing.T, r routing.Scorer, fleet *routingtest.Fleet, metrics []*endpoint.Metrics) ([]float64, error) {
	t.Helper()
	for i, m := range metrics {
		if m != nil {
			fleet.SetMetrics(i, *m)
		}
	}
	rc := fleet.Context(routing.Request{})
	scores := make([]float64, len(metrics))
	return scores, r.Score(rc, routingtest.Candidates(rc), scores)
}

// assertScores fails t unless got equals want within rounding.
func assertScores(t *testing.T, got, want []float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("scores = %v, want %v", got, want)
			return
		}
	}
}

func TestScoreComparesTokensPerSecondBetweenDistinctSnapshots(t *testing.T) {
	now := time.Now()
	fleet := routingtest.NewFleet("llama", 3)
	r := throughput.New()
	if _, err := score(t, r, fleet, []*endpoint.Metrics{
		new(snapshot(1000, 9, now.Add(-30*time.Second))), new(snapshot(0, 1, now.Add(-30*time.Second))), new(snapshot(500, 5, now.Add(-30*time.Second))),
	}); err != nil {
		t.Fatalf("first Score: %v", err)
	}
	// Scoring again on the same snapshots changes nothing.
	if _, err := score(t, r, fleet, make([]*endpoint.Metrics, 3)); err != nil {
		t.Fatalf("repeated Score: %v", err)
	}
	got, err := score(t, r, fleet, []*endpoint.Metrics{
		new(snapshot(1100, 9, now.Add(-20*time.Second))), new(snapshot(2000, 1, now.Add(-20*time.Second))), new(snapshot(1500, 5, now.Add(-10*time.Second))),
	})
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-10, -200, -50}) // 100 tokens in 10 s, 2000 in 10 s, 1000 in 20 s
}

func TestScoreComparesRunningUntilEveryKnownPodHasTwoSnapshots(t *testing.T) {
	now := time.Now()
	fleet := routingtest.NewFleet("llama", 4)
	r := throughput.New()
	got, err := score(t, r, fleet, []*endpoint.Metrics{
		new(snapshot(0, 3, now.Add(-30*time.Second))), new(snapshot(0, 1, now.Add(-30*time.Second))), nil, nil,
	})
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-3, -1, -4, -4}) // one snapshot each; pods 2 and 3 unknown

	// Pods 0 and 1 now have rates, but pod 2 has only one snapshot.
	got, err = score(t, r, fleet, []*endpoint.Metrics{
		new(snapshot(100, 3, now.Add(-20*time.Second))), new(snapshot(900, 1, now.Add(-20*time.Second))), new(snapshot(0, 2, now.Add(-20*time.Second))), nil,
	})
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-3, -1, -2, -4})

	// An engine restart (counters going down) starts that pod's history over.
	got, err = score(t, r, fleet, []*endpoint.Metrics{
		new(snapshot(200, 3, now.Add(-10*time.Second))), new(snapshot(50, 1, now.Add(-10*time.Second))), new(snapshot(100, 2, now.Add(-10*time.Second))), nil,
	})
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-3, -1, -2, -4})
}

func TestPick(t *testing.T) {
	now := time.Now()
	fleet := routingtest.NewFleet("llama", 4)
	r := routing.Highest(throughput.New(), routingtest.SeededRandom(1))
	pick := func(metrics []*endpoint.Metrics) (int, error) {
		for i, m := range metrics {
			if m != nil {
				fleet.SetMetrics(i, *m)
			}
		}
		rc := fleet.Context(routing.Request{})
		return r.Pick(rc, routingtest.Candidates(rc))
	}
	// First snapshots: least Running wins; pod 3 has none and is never picked.
	i, err := pick([]*endpoint.Metrics{new(snapshot(0, 4, now.Add(-30*time.Second))), new(snapshot(0, 2, now.Add(-30*time.Second))), new(snapshot(0, 1, now.Add(-30*time.Second))), nil})
	if err != nil || i != 2 {
		t.Errorf("Pick on first snapshots = %d, %v; want 2 (fewest running)", i, err)
	}
	// Second snapshots: the least throughput wins, whatever Running says.
	i, err = pick([]*endpoint.Metrics{new(snapshot(50, 4, now.Add(-20*time.Second))), new(snapshot(500, 2, now.Add(-20*time.Second))), new(snapshot(300, 1, now.Add(-20*time.Second))), nil})
	if err != nil || i != 0 {
		t.Errorf("Pick on second snapshots = %d, %v; want 0 (least tokens per second)", i, err)
	}
}

func TestUnknownMetricsAreUndecided(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	fleet.SetMetrics(1, snapshot(100, 1, time.Now().Add(-2*routingtest.StaleAfter))) // stale; pod 0 has none
	r := routing.Highest(throughput.New(), routingtest.SeededRandom(1))
	rc := fleet.Context(routing.Request{})
	if _, err := r.Pick(rc, routingtest.Candidates(rc)); !errors.Is(err, routing.ErrUndecided) {
		t.Errorf("Pick error = %v, want %v", err, routing.ErrUndecided)
	}
}

func TestConcurrentScoresWhileMetricsChange(t *testing.T) {
	const pods = 8
	fleet := routingtest.NewFleet("llama", pods)
	r := throughput.New()
	start := time.Now().Add(-50 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		for step := range 50 {
			for i := range pods {
				fleet.SetMetrics(i, endpoint.Metrics{GenerationTokens: float64(step * (i + 1)), ScrapedAt: start.Add(time.Duration(step) * time.Second)})
			}
		}
	})
	for range 8 {
		wg.Go(func() {
			scores := make([]float64, pods)
			for range 200 {
				rc := fleet.Context(routing.Request{})
				cands := routingtest.Candidates(rc)
				if err := r.Score(rc, cands, scores); err != nil && !errors.Is(err, routing.ErrUndecided) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Whatever snapshots the concurrent decisions saw, the Router now sees step 49,
	// then step 50; every pod's throughput is constant.
	if _, err := score(t, r, fleet, make([]*endpoint.Metrics, pods)); err != nil {
		t.Fatalf("Score: %v", err)
	}
	last := make([]*endpoint.Metrics, pods)
	for i := range pods {
		last[i] = &endpoint.Metrics{GenerationTokens: float64(50 * (i + 1)), ScrapedAt: start.Add(50 * time.Second)}
	}
	got, err := score(t, r, fleet, last)
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	for i := range pods {
		if want := -float64(i + 1); got[i] != want {
			t.Errorf("pod %d scored %v, want %v (its tokens per second)", i, got[i], want)
		}
	}
}

func TestRoute(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	for i, running := range []float64{5, 0, 2} {
		fleet.SetMetrics(i, snapshot(0, running, time.Now()))
	}
	rc := fleet.Context(routing.Request{})
	router := routing.NewRouter(routing.Highest(throughput.New(), routingtest.SeededRandom(1)), routingtest.Options())
	target := routingtest.Route(t, router, rc)
	defer target.Release(0)
	if target.Pod.Key.Name != "p0001" {
		t.Errorf("routed to %s, want p0001 (fewest running on first snapshots)", target.Pod.Key.Name)
	}
}

// TestBurstBetweenScrapesSpreads routes a burst that arrives before the next scrape: each
// request in flight counts towards its pod's projected throughput, so the burst spreads
// over the pods instead of piling onto the one that looked idlest.
func TestBurstBetweenScrapesSpreads(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	r := throughput.New()
	start := time.Now().Add(-time.Second)
	// Two snapshots a second apart: pod 0 idle, pods 1 and 2 at 100 tokens/s with one request.
	for i, rate := range []float64{0, 100, 100} {
		running := min(rate, 1)
		fleet.SetMetrics(i, snapshot(1000, running, start))
		if _, err := score(t, r, fleet, make([]*endpoint.Metrics, 3)); err != nil {
			t.Fatal(err)
		}
		fleet.SetMetrics(i, snapshot(1000+rate, running, start.Add(time.Second)))
	}
	router := routing.NewRouter(routing.Highest(r, routingtest.SeededRandom(1)), routingtest.Options())
	for range 30 {
		routingtest.Route(t, router, fleet.Context(routing.Request{}))
	}
	for i := range 3 {
		if n := fleet.Pod(i).Load().InFlight(); n < 5 {
			t.Errorf("pod %d has %d of 30 requests: the burst piled onto the others", i, n)
		}
	}
}
