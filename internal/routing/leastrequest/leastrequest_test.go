package leastrequest_test

import (
	"slices"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastrequest"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

func TestPickChoosesFewestInFlight(t *testing.T) {
	tests := []struct {
		name     string
		inFlight []int
		want     []int // acceptable indices; every one of them must come up
	}{
		{name: "single candidate", inFlight: []int{5}, want: []int{0}},
		{name: "one least loaded", inFlight: []int{3, 1, 2}, want: []int{1}},
		{name: "ties broken at random", inFlight: []int{2, 0, 4, 0, 0}, want: []int{1, 3, 4}},
		{name: "all idle", inFlight: []int{0, 0, 0}, want: []int{0, 1, 2}},
		{name: "ties side by side", inFlight: []int{3, 0, 0, 0, 5}, want: []int{1, 2, 3}},
		{name: "a lower count ends the ties before it", inFlight: []int{1, 1, 0, 0, 1}, want: []int{2, 3}},
		{name: "ties apart", inFlight: []int{0, 1, 1, 0}, want: []int{0, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", len(tt.inFlight))
			for i, n := range tt.inFlight {
				fleet.Reserve(i, n)
			}
			rc := fleet.Context(routing.Request{})
			cands := routingtest.Candidates(rc)
			r := leastrequest.New(routingtest.SeededRandom(1))
			seen, seenPod := map[int]bool{}, map[int]bool{}
			for range 100 {
				i, err := r.Pick(rc, cands)
				if err != nil {
					t.Fatalf("Pick: %v", err)
				}
				if !slices.Contains(tt.want, i) {
					t.Fatalf("Pick = %d, want one of %v", i, tt.want)
				}
				seen[i] = true
				i, n, ok := r.PickPod(rc, routing.Eligibility{})
				if !ok || !slices.Contains(tt.want, i) || n != int64(tt.inFlight[i]) {
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

// TestPickPodLeavesOutPodsAtTheLimit checks that PickPod chooses only below the limit,
// the least loaded of those, and declines when every pod is at it.
func TestPickPodLeavesOutPodsAtTheLimit(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	fleet.Reserve(0, 1)
	fleet.Reserve(1, 3)
	fleet.Reserve(2, 2)
	rc := fleet.Context(routing.Request{})
	r := leastrequest.New(routingtest.SeededRandom(1))
	if i, n, ok := r.PickPod(rc, routing.Eligibility{Limit: 3}); !ok || i != 0 || n != 1 {
		t.Errorf("limit 3: PickPod = %d, %d, %t; want pod 0 with 1 in flight", i, n, ok)
	}
	if i, _, ok := r.PickPod(rc, routing.Eligibility{Limit: 1}); ok {
		t.Errorf("limit 1, every pod at it: PickPod = %d, want it to decline", i)
	}
}

// TestPickPodDrawsOnlyAmongAdmittedTies checks that pods at the limit ahead of the
// admitted ones neither get chosen nor count as ties of the least loaded.
func TestPickPodDrawsOnlyAmongAdmittedTies(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 5)
	for i, n := range []int{2, 2, 1, 2, 1} {
		fleet.Reserve(i, n)
	}
	rc := fleet.Context(routing.Request{})
	r := leastrequest.New(routingtest.SeededRandom(1))
	seen := map[int]int{}
	for range 200 {
		i, n, ok := r.PickPod(rc, routing.Eligibility{Limit: 2})
		if !ok || (i != 2 && i != 4) || n != 1 {
			t.Fatalf("PickPod = %d, %d, %t; want pod 2 or 4 with 1 in flight", i, n, ok)
		}
		seen[i]++
	}
	if seen[2] < 60 || seen[4] < 60 {
		t.Errorf("PickPod chose %v over 200 decisions, want pods 2 and 4 about evenly", seen)
	}
}

func TestScoreIsMinusInFlight(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	fleet.Reserve(0, 4)
	fleet.Reserve(2, 1)
	rc := fleet.Context(routing.Request{})
	scores := make([]float64, 3)
	// No metrics at all: least-request never needs them.
	if err := leastrequest.New(routing.DefaultRandom).Score(rc, routingtest.Candidates(rc), scores); err != nil {
		t.Fatalf("Score: %v", err)
	}
	if want := []float64{-4, 0, -1}; !slices.Equal(scores, want) {
		t.Errorf("scores = %v, want %v", scores, want)
	}
}

// TestBurstSpreadsEvenly checks that selection and reservation happen in one step: 1,000
// concurrent decisions over 10 idle pods, none released, leave each pod with 100 ± 1
// requests in flight.
func TestBurstSpreadsEvenly(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	router := routing.NewRouter(leastrequest.New(routingtest.SeededRandom(1)), routingtest.Options())
	routingtest.CheckBurstSpreadsEvenly(t, router, fleet)
}

func TestScoreCellsIsScore(t *testing.T) {
	routingtest.CheckScoreCellsIsScore(t, leastrequest.New(routingtest.SeededRandom(1)), nil)
}
