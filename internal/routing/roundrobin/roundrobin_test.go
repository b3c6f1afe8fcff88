package roundrobin_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/roundrobin"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

func TestTurnsCycleInKeyOrderThroughPickAndScore(t *testing.T) {
	const pods = 3
	fleet := routingtest.NewFleet("llama", pods)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	r := roundrobin.New()

	scores := make([]float64, pods)
	for k := range 7 {
		want := k % pods
		if k%2 == 0 {
			if i, err := r.Pick(rc, cands); err != nil || i != want {
				t.Fatalf("decision %d: Pick = %d, %v; want %d", k, i, err, want)
			}
			continue
		}
		if err := r.Score(rc, cands, scores); err != nil {
			t.Fatalf("decision %d: Score: %v", k, err)
		}
		wantScores := make([]float64, pods)
		wantScores[want] = 1
		if !slices.Equal(scores, wantScores) {
			t.Fatalf("decision %d: scores = %v, want %v", k, scores, wantScores)
		}
	}
}

func TestTurnsStayInRangeWhenCandidatesChange(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 8)
	rc := fleet.Context(routing.Request{})
	all := routingtest.Candidates(rc)
	r := roundrobin.New()
	scores := make([]float64, len(all))
	for n := 8; n >= 1; n-- {
		for range 3 {
			i, err := r.Pick(rc, all[:n])
			if err != nil || i < 0 || i >= n {
				t.Fatalf("Pick over %d candidates = %d, %v", n, i, err)
			}
			if err := r.Score(rc, all[:n], scores[:n]); err != nil {
				t.Fatalf("Score over %d candidates: %v", n, err)
			}
		}
	}
}

func TestConcurrentPicksShareTurnsEvenly(t *testing.T) {
	const pods, picks = 10, 1000
	fleet := routingtest.NewFleet("llama", pods)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	r := roundrobin.New()

	var mu sync.Mutex
	counts := make([]int, pods)
	var wg sync.WaitGroup
	for range picks {
		wg.Go(func() {
			i, err := r.Pick(rc, cands)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			counts[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, n := range counts {
		if n != picks/pods {
			t.Errorf("pod %d picked %d times, want %d", i, n, picks/pods)
		}
	}
}

func TestRouteVisitsEveryPodInTurn(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	router := routing.NewRouter(roundrobin.New(), routingtest.Options())
	var got []string
	for range 6 {
		target := routingtest.Route(t, router, fleet.Context(routing.Request{}))
		got = append(got, target.Pod.Key.Name)
		target.Release(0)
	}
	if want := []string{"p0000", "p0001", "p0002", "p0000", "p0001", "p0002"}; !slices.Equal(got, want) {
		t.Errorf("routed to %v, want %v", got, want)
	}
}

// TestSpansOfALargeFleetKeepTheRotationEven has goroutines pick at once over a fleet
// large enough for turns to come in spans, each a number of picks that is no multiple of
// the fleet: the turns they took, together, are a run of the rotation with at most a
// few spans' turns held back, so no pod falls more than a few picks short of its share,
// and none gets more than its share rounded up.
func TestSpansOfALargeFleetKeepTheRotationEven(t *testing.T) {
	const pods, goroutines, picks = roundrobin.SpanCandidates * 2, 8, 1000
	fleet := routingtest.NewFleet("llama", pods)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	r := roundrobin.New()

	counts := make([][]int, goroutines)
	var wg sync.WaitGroup
	for g := range counts {
		counts[g] = make([]int, pods)
		wg.Go(func() {
			for range picks {
				i, err := r.Pick(rc, cands)
				if err != nil {
					t.Error(err)
					return
				}
				counts[g][i]++
			}
		})
	}
	wg.Wait()
	share := goroutines * picks / pods // 15, and 16 for a pod of a rotation's last part
	for i := range pods {
		n := 0
		for g := range counts {
			n += counts[g][i]
		}
		if n < share-4 || n > share+1 {
			t.Errorf("pod %d picked %d times, want %d or %d, or a few fewer", i, n, share, share+1)
		}
	}
}
