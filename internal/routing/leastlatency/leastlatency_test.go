package leastlatency_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastlatency"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// pod describes one test pod.
type pod struct {
	// prefill, decode and service are the pod's observed speed in seconds: per prompt
	// token, per output token and per request; all zero means not observed yet.
	prefill, decode, service float64
	running, waiting         float64
	// slots is the learnt number of running requests at which the engine queues.
	slots    float64
	inFlight int
	// missing: no metrics; stale: metrics older than the staleness threshold.
	missing, stale bool
}

// metrics returns engine metrics showing p's speed, as learnt from many scrapes, and its
// queue.
func (p pod) metrics() endpoint.Metrics {
	m := endpoint.Metrics{Running: p.running, Waiting: p.waiting}
	if p.prefill != 0 || p.decode != 0 || p.service != 0 {
		m.Profile = endpoint.Profile{PrefillPerToken: p.prefill, DecodePerToken: p.decode, Service: p.service,
			Slots: p.slots, PrefilledTokens: 1e6, Requests: 1e3}
	}
	if p.stale {
		m.ScrapedAt = time.Now().Add(-2 * routingtest.StaleAfter)
	}
	return m
}

// contextOver builds a fleet of the described pods and returns a context for req over it.
func contextOver(pods []pod, req routing.Request) *routing.RoutingContext {
	fleet := routingtest.NewFleet("llama", len(pods))
	for i, p := range pods {
		fleet.Reserve(i, p.inFlight)
		if !p.missing {
			fleet.SetMetrics(i, p.metrics())
		}
	}
	return fleet.Context(req)
}

func TestScoreIsMinusExpectedLatency(t *testing.T) {
	busy := pod{prefill: 0.001, decode: 0.02, service: 3, running: 4, waiting: 2, slots: 4}
	pods := []pod{
		busy, // 3 to finish before a slot is free: 3×3/4 = 2.25, prefill 500×0.001 = 0.5, decode 100×0.02 = 2
		{prefill: 0.001, decode: 0.02, service: 3, slots: 1, inFlight: 3}, // 3 sent since the scrape, one slot: 9 + 0.5 + 2
		{},              // fresh, not learnt, idle: the fleet's mean speed and fewest slots, no queue
		{missing: true}, // unknown: below the lowest known
		{stale: true},   // unknown too
		{running: 1, slots: 8, prefill: 0.004, decode: 0.08, service: 12}, // no queue: 2 + 8
	}
	rc := contextOver(pods, routing.Request{PromptTokens: 500, MaxTokens: 100})
	scores := make([]float64, len(pods))
	if err := leastlatency.New(routingtest.SeededRandom(1)).Score(rc, routingtest.Candidates(rc), scores); err != nil {
		t.Fatalf("Score: %v", err)
	}
	// The speeds of the learnt pods differ from their mean by more than half again, so
	// each keeps its own; the pod not learnt yet gets the mean of the three.
	meanPrefill, meanDecode := (0.001+0.001+0.004)/3, (0.02+0.02+0.08)/3
	want := []float64{-4.75, -11.5, -(500*meanPrefill + 100*meanDecode), -12.5, -12.5, -10}
	for i := range want {
		if !(math.Abs(scores[i]-want[i]) <= 1e-9) {
			t.Errorf("scores[%d] = %v, want %v", i, scores[i], want[i])
		}
	}
}

func TestPick(t *testing.T) {
	fastDecode := pod{prefill: 0.001, decode: 0.01, service: 1, running: 1, waiting: 1}
	slowDecode := pod{prefill: 0.001, decode: 0.04, service: 1}
	fastPrefill := pod{prefill: 0.0001, decode: 0.02, service: 1, running: 1, waiting: 1}
	slowPrefill := pod{prefill: 0.002, decode: 0.02, service: 1}
	tests := []struct {
		name    string
		pods    []pod
		req     routing.Request
		want    int
		wantErr error
	}{
		{name: "shorter engine queue", req: routing.Request{PromptTokens: 100},
			pods: []pod{{prefill: 0.001, decode: 0.02, service: 2, running: 2, waiting: 5}, {prefill: 0.001, decode: 0.02, service: 2, running: 2}}, want: 1},
		{name: "requests sent since the scrape count beyond the slots", req: routing.Request{PromptTokens: 100},
			pods: []pod{{prefill: 0.001, decode: 0.02, service: 2, running: 2, slots: 2, inFlight: 5}, {prefill: 0.001, decode: 0.02, service: 2, running: 2, slots: 2, inFlight: 2}}, want: 1},
		{name: "long completion: faster decode despite a queue", req: routing.Request{MaxTokens: 1000},
			pods: []pod{slowDecode, fastDecode}, want: 1},
		{name: "short completion: no queue despite slower decode", req: routing.Request{MaxTokens: 10},
			pods: []pod{slowDecode, fastDecode}, want: 0},
		{name: "default completion length is 128 tokens", req: routing.Request{},
			pods: []pod{slowDecode, fastDecode}, want: 1}, // 128×0.04 = 5.12 > 1 + 1.28
		{name: "long prompt: faster prefill despite a queue", req: routing.Request{PromptTokens: 4000, MaxTokens: 1},
			pods: []pod{slowPrefill, fastPrefill}, want: 1},
		{name: "short prompt: no queue despite slower prefill", req: routing.Request{PromptTokens: 10, MaxTokens: 1},
			pods: []pod{slowPrefill, fastPrefill}, want: 0},
		{name: "new idle pod gets traffic", req: routing.Request{PromptTokens: 100},
			pods: []pod{{prefill: 0.001, decode: 0.02, service: 2, running: 8, waiting: 1}, {}}, want: 1},
		{name: "unknown pods are skipped", req: routing.Request{PromptTokens: 100},
			pods: []pod{{missing: true}, {stale: true, prefill: 0.0001, decode: 0.001, service: 0.1}, {prefill: 0.01, decode: 0.1, service: 20, running: 30, waiting: 30}}, want: 2},
		{name: "equal latency: fewer requests in flight", req: routing.Request{PromptTokens: 100},
			pods: []pod{{prefill: 0.001, decode: 0.02, service: 2, running: 1, inFlight: 3}, {prefill: 0.001, decode: 0.02, service: 2, running: 1, inFlight: 1}}, want: 1},
		{name: "all missing", pods: []pod{{missing: true}, {missing: true}}, wantErr: routing.ErrUndecided},
		{name: "all stale", pods: []pod{{stale: true, prefill: 0.001, decode: 0.02, service: 1}, {stale: true}}, wantErr: routing.ErrUndecided},
		{name: "none observed", pods: []pod{{running: 1}, {}}, wantErr: routing.ErrUndecided},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := contextOver(tt.pods, tt.req)
			i, err := leastlatency.New(routingtest.SeededRandom(1)).Pick(rc, routingtest.Candidates(rc))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Pick error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || i != tt.want {
				t.Errorf("Pick = %d, %v; want %d", i, err, tt.want)
			}
		})
	}
}

func TestPickBreaksTiesAtRandomWithinRange(t *testing.T) {
	same := pod{prefill: 0.001, decode: 0.02, service: 1, running: 1}
	rc := contextOver([]pod{same, same, same, {missing: true}}, routing.Request{PromptTokens: 100})
	cands := routingtest.Candidates(rc)
	r := leastlatency.New(routingtest.SeededRandom(1))
	seen := map[int]bool{}
	for range 100 {
		i, err := r.Pick(rc, cands)
		if err != nil || i < 0 || i > 2 {
			t.Fatalf("Pick = %d, %v; want one of the known candidates 0..2", i, err)
		}
		seen[i] = true
	}
	if len(seen) != 3 {
		t.Errorf("picked %v over 100 decisions, want each of the 3 equal candidates", seen)
	}
}

func TestRoute(t *testing.T) {
	rc := contextOver([]pod{
		{prefill: 0.001, decode: 0.02, service: 2, running: 4, waiting: 4},
		{prefill: 0.001, decode: 0.02, service: 2, running: 4},
	}, routing.Request{PromptTokens: 100})
	router := routing.NewRouter(leastlatency.New(routingtest.SeededRandom(1)), routingtest.Options())
	target := routingtest.Route(t, router, rc)
	defer target.Release(0)
	if target.Pod.Key.Name != "p0001" {
		t.Errorf("routed to %s, want p0001", target.Pod.Key.Name)
	}
}

// TestPickPodIsPick checks PickPod against Pick over random fleets and limits.
func TestPickPodIsPick(t *testing.T) {
	routingtest.CheckPickPodIsPick(t, func(*routingtest.Fleet, *rand.Rand) routing.PodPicker {
		return leastlatency.New(routingtest.FirstTie)
	})
}

// TestBurstSpreadsEvenly checks that a burst over idle pods, whose latencies are equal,
// spreads by requests in flight: 1,000 concurrent decisions over 10 such pods, none
// released, leave each with 100 ± 1 requests in flight.
func TestBurstSpreadsEvenly(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	for i := range 10 {
		fleet.SetMetrics(i, pod{prefill: 0.001, decode: 0.02, service: 2}.metrics())
	}
	router := routing.NewRouter(leastlatency.New(routingtest.SeededRandom(1)), routingtest.Options())
	routingtest.CheckBurstSpreadsEvenly(t, router, fleet)
}

func TestScoreCellsIsScore(t *testing.T) {
	routingtest.CheckScoreCellsIsScore(t, leastlatency.New(routingtest.SeededRandom(1)), nil)
}
