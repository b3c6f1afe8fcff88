package random_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/random"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

func TestPickIsUniformAndInRange(t *testing.T) {
	const pods, picks = 10, 10000
	fleet := routingtest.NewFleet("llama", pods)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc) // no metrics at all: random does not need them
	r := random.New(routingtest.SeededRandom(1))

	counts := make([]int, pods)
	for range picks {
		i, err := r.Pick(rc, cands)
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		if i < 0 || i >= pods {
			t.Fatalf("Pick = %d, want an index in [0, %d)", i, pods)
		}
		counts[i]++
	}
	for i, n := range counts {
		if n < 900 || n > 1100 {
			t.Errorf("pod %d picked %d times of %d, want about %d", i, n, picks, picks/pods)
		}
	}
}

// TestPickPodIsUniformAndDeclinesAtTheLimit checks that PickPod draws every pod about
// equally often with its count, and declines a pod at the limit.
func TestPickPodIsUniformAndDeclinesAtTheLimit(t *testing.T) {
	const pods, picks = 10, 10000
	fleet := routingtest.NewFleet("llama", pods)
	fleet.Reserve(3, 2)
	rc := fleet.Context(routing.Request{})
	r := random.New(routingtest.SeededRandom(1))
	counts := make([]int, pods)
	declined := 0
	for range picks {
		i, n, ok := r.PickPod(rc, routing.Eligibility{Limit: 2})
		switch {
		case i < 0 || i >= pods:
			t.Fatalf("PickPod = %d, want an index in [0, %d)", i, pods)
		case i == 3 && (ok || n != 2):
			t.Fatalf("PickPod of the pod at the limit = %d in flight, ok %t; want 2, declined", n, ok)
		case i == 3:
			declined++
		case !ok || n != 0:
			t.Fatalf("PickPod = %d, %d, %t; want an idle pod accepted", i, n, ok)
		}
		counts[i]++
	}
	for i, n := range counts {
		if n < 900 || n > 1100 {
			t.Errorf("pod %d drawn %d times of %d, want about %d", i, n, picks, picks/pods)
		}
	}
	if declined != counts[3] {
		t.Errorf("declined %d of the %d draws of the pod at the limit", declined, counts[3])
	}
}

func TestScoreHighestIsUniform(t *testing.T) {
	const pods, rounds = 5, 5000
	fleet := routingtest.NewFleet("llama", pods)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	rnd := routingtest.SeededRandom(2)
	r := random.New(rnd)

	counts := make([]int, pods)
	scores := make([]float64, pods)
	for range rounds {
		if err := r.Score(rc, cands, scores); err != nil {
			t.Fatalf("Score: %v", err)
		}
		for i, s := range scores {
			if s < 0 || s >= 1 {
				t.Fatalf("scores[%d] = %v, want a value in [0, 1)", i, s)
			}
		}
		counts[routing.ArgMax(scores, rnd)]++
	}
	for i, n := range counts {
		if n < 900 || n > 1100 {
			t.Errorf("pod %d scored highest %d times of %d, want about %d", i, n, rounds, rounds/pods)
		}
	}
}

func TestRouteReservesTheChosenPod(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 4)
	router := routing.NewRouter(random.New(routingtest.SeededRandom(3)), routingtest.Options())
	target := routingtest.Route(t, router, fleet.Context(routing.Request{}))
	defer target.Release(0)
	if n := target.Pod.Load().InFlight(); n != 1 {
		t.Errorf("in flight on %s = %d, want 1", target.Pod.Key.Name, n)
	}
}
