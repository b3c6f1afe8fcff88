package throughput_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/throughput"
)

// rated returns metrics of an engine processing rate tokens per second over its last
// scrape interval, with running requests.
func rated(rate, running float64) endpoint.Metrics {
	return endpoint.Metrics{Running: running, Profile: endpoint.Profile{Throughput: rate, ThroughputKnown: true}}
}

// unrated returns metrics of an engine scraped once, with running requests.
func unrated(running float64) endpoint.Metrics {
	return endpoint.Metrics{Running: running}
}

// fleetOf returns a fleet whose pod i has metrics[i] (nil: none) and inFlight[i]
// requests in flight (inFlight may be shorter).
func fleetOf(metrics []*endpoint.Metrics, inFlight ...int) *routingtest.Fleet {
	fleet := routingtest.NewFleet("llama", len(metrics))
	for i, m := range metrics {
		if m != nil {
			fleet.SetMetrics(i, *m)
		}
	}
	for i, n := range inFlight {
		fleet.Reserve(i, n)
	}
	return fleet
}

// score returns r's scores of fleet's pods.
func score(t *testing.T, fleet *routingtest.Fleet) ([]float64, error) {
	t.Helper()
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	scores := make([]float64, len(cands))
	return scores, throughput.New(routingtest.SeededRandom(1)).Score(rc, cands, scores)
}

// assertScores fails t unless got equals want within rounding.
func assertScores(t *testing.T, got, want []float64) {
	t.Helper()
	for i := range want {
		if !(math.Abs(got[i]-want[i]) <= 1e-9) {
			t.Errorf("scores = %v, want %v", got, want)
			return
		}
	}
}

func TestScoreComparesThroughputs(t *testing.T) {
	got, err := score(t, fleetOf([]*endpoint.Metrics{new(rated(10, 9)), new(rated(200, 1)), new(rated(50, 5)), nil}))
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-10, -200, -50, -201}) // pod 3 unknown: below the lowest
}

func TestScoreComparesRunningWhileSomeThroughputIsUnknown(t *testing.T) {
	got, err := score(t, fleetOf([]*endpoint.Metrics{new(rated(100, 3)), new(rated(900, 1)), new(unrated(2)), nil}, 0, 0, 1))
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-3, -1, -3, -4}) // pod 2: 2 running and 1 in flight
}

func TestScoreCountsRequestsInFlight(t *testing.T) {
	// Pod 0 runs 2 requests at 100 tokens/s (50 each) and pod 2 one at 0.5 tokens/s
	// (counted as minRequestRate); idle pod 1 prices its requests at their mean, 25.25.
	got, err := score(t, fleetOf([]*endpoint.Metrics{new(rated(100, 2)), new(rated(0, 0)), new(rated(0.5, 1))}, 3, 2, 1))
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	assertScores(t, got, []float64{-(100 + 3*50), -(2 * 25.25), -(0.5 + 1)})
}

func TestPick(t *testing.T) {
	tests := []struct {
		name     string
		metrics  []*endpoint.Metrics
		inFlight []int
		want     int
	}{
		{"least throughput, whatever Running says", []*endpoint.Metrics{new(rated(50, 4)), new(rated(500, 2)), new(rated(300, 1)), nil}, nil, 0},
		{"fewest running while a throughput is unknown", []*endpoint.Metrics{new(unrated(4)), new(rated(0, 2)), new(rated(0, 1)), nil}, nil, 2},
		{"equal loads: fewest in flight", []*endpoint.Metrics{new(unrated(2)), new(unrated(4)), new(unrated(3))}, []int{2, 0, 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := fleetOf(tt.metrics, tt.inFlight...).Context(routing.Request{})
			if i, err := throughput.New(routingtest.SeededRandom(1)).Pick(rc, routingtest.Candidates(rc)); err != nil || i != tt.want {
				t.Errorf("Pick = %d, %v; want %d", i, err, tt.want)
			}
		})
	}
}

func TestUnknownMetricsAreUndecided(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	stale := rated(100, 1)
	stale.ScrapedAt = time.Now().Add(-2 * routingtest.StaleAfter)
	fleet.SetMetrics(1, stale) // pod 0 has none
	rc := fleet.Context(routing.Request{})
	if _, err := throughput.New(routingtest.SeededRandom(1)).Pick(rc, routingtest.Candidates(rc)); !errors.Is(err, routing.ErrUndecided) {
		t.Errorf("Pick error = %v, want %v", err, routing.ErrUndecided)
	}
	if _, _, ok := throughput.New(routingtest.SeededRandom(1)).PickPod(rc, routing.Eligibility{StaleAfter: routingtest.StaleAfter}); ok {
		t.Error("PickPod chose a pod with no fresh metrics, want a decline")
	}
}

// TestPickPodIsPick checks PickPod against Pick over random fleets and limits.
func TestPickPodIsPick(t *testing.T) {
	routingtest.CheckPickPodIsPick(t, func(*routingtest.Fleet, *rand.Rand) routing.PodPicker {
		return throughput.New(routingtest.FirstTie)
	})
}

// TestPickPodInOnePassIsPick checks PickPod against Pick over random fleets whose
// throughputs are all known and whose idle engines have nothing in flight, which PickPod
// decides in one pass: with throughputs of four values, ties are common, and the first
// tie must be Pick's.
func TestPickPodInOnePassIsPick(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 7))
	for iter := range 300 {
		metrics := make([]*endpoint.Metrics, 1+rnd.IntN(12))
		inFlight := make([]int, len(metrics))
		for i := range metrics {
			running := float64(rnd.IntN(4))
			metrics[i] = new(rated(float64(rnd.IntN(4))*37.5, running))
			if running > 0 {
				inFlight[i] = rnd.IntN(3)
			}
		}
		rc := fleetOf(metrics, inFlight...).Context(routing.Request{})
		want, err := throughput.New(routingtest.FirstTie).Pick(rc, routingtest.Candidates(rc))
		if err != nil {
			t.Fatalf("iteration %d: Pick: %v", iter, err)
		}
		got, n, ok := throughput.New(routingtest.FirstTie).PickPod(rc, routing.Eligibility{StaleAfter: routingtest.StaleAfter})
		if !ok || got != want || n != int64(inFlight[want]) {
			t.Fatalf("iteration %d: PickPod = %d, %d, %t; Pick chose %d (%d in flight)", iter, got, n, ok, want, inFlight[want])
		}
	}
}

func TestRoute(t *testing.T) {
	rc := fleetOf([]*endpoint.Metrics{new(unrated(5)), new(unrated(0)), new(unrated(2))}).Context(routing.Request{})
	router := routing.NewRouter(throughput.New(routingtest.SeededRandom(1)), routingtest.Options())
	target := routingtest.Route(t, router, rc)
	defer target.Release(0)
	if target.Pod.Key.Name != "p0001" {
		t.Errorf("routed to %s, want p0001 (fewest running while no throughput is known)", target.Pod.Key.Name)
	}
}

// TestBurstBetweenScrapesSpreads routes a burst that arrives before the next scrape: each
// request in flight counts towards its pod's projected throughput, so the burst spreads
// over the pods instead of piling onto the one that looked idlest.
func TestBurstBetweenScrapesSpreads(t *testing.T) {
	// Pod 0 idle, pods 1 and 2 at 100 tokens/s with one request.
	fleet := fleetOf([]*endpoint.Metrics{new(rated(0, 0)), new(rated(100, 1)), new(rated(100, 1))})
	router := routing.NewRouter(throughput.New(routingtest.SeededRandom(1)), routingtest.Options())
	for range 30 {
		routingtest.Route(t, router, fleet.Context(routing.Request{}))
	}
	for i := range 3 {
		if n := fleet.Pod(i).Load().InFlight(); n < 5 {
			t.Errorf("pod %d has %d of 30 requests: the burst piled onto the others", i, n)
		}
	}
}

// TestBurstSpreadsEvenly checks that selection and reservation happen in one step: 1,000
// concurrent decisions over 10 idle pods, none released, leave each with 100 ± 1
// requests in flight.
func TestBurstSpreadsEvenly(t *testing.T) {
	fleet := fleetOf([]*endpoint.Metrics{new(rated(0, 0)), new(rated(0, 0)), new(rated(0, 0)), new(rated(0, 0)), new(rated(0, 0)),
		new(rated(0, 0)), new(rated(0, 0)), new(rated(0, 0)), new(rated(0, 0)), new(rated(0, 0))})
	router := routing.NewRouter(throughput.New(routingtest.SeededRandom(1)), routingtest.Options())
	routingtest.CheckBurstSpreadsEvenly(t, router, fleet)
}

func TestScoreCellsIsScore(t *testing.T) {
	routingtest.CheckScoreCellsIsScore(t, throughput.New(routingtest.SeededRandom(1)), nil)
}
