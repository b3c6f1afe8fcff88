package routing_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
)

func TestArgMaxDrawsOnceAmongTies(t *testing.T) {
	draws := 0
	counting := func(n int) int { draws++; return n - 1 } // always the last tie
	if got := routing.ArgMax([]float64{1, 3, 2, 3, 0, 3}, counting); got != 5 || draws != 1 {
		t.Errorf("ArgMax over three ties drawing the last = %d after %d draws, want 5 after 1", got, draws)
	}
	draws = 0
	if got := routing.ArgMax([]float64{1, 3, 2}, counting); got != 1 || draws != 0 {
		t.Errorf("ArgMax with one highest = %d after %d draws, want 1 after none", got, draws)
	}
	if got := routing.ArgMax([]float64{math.NaN(), 2}, counting); got != 0 {
		t.Errorf("ArgMax with a NaN first = %d, want 0", got)
	}
}

func TestArgMaxIsUniformAmongTies(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	scores := []float64{5, 1, 5, 5, 0}
	counts := map[int]int{}
	const n = 30000
	for range n {
		counts[routing.ArgMax(scores, rnd.IntN)]++
	}
	for _, i := range []int{0, 2, 3} {
		if c := counts[i]; c < n/3-600 || c > n/3+600 {
			t.Errorf("tie %d chosen %d times of %d, want about %d", i, c, n, n/3)
		}
	}
	if counts[1]+counts[4] != 0 {
		t.Errorf("lower scores chosen: %v", counts)
	}
}

func TestTiesDrawUniformlyAmongAllTies(t *testing.T) {
	for _, n := range []int{1, 3, 64, 65, 200} {
		counts := make([]int, n)
		rnd := rand.New(rand.NewPCG(uint64(n), 2))
		draws := 0
		counting := func(k int) int { draws++; return rnd.IntN(k) }
		const rounds = 200
		for range rounds * n {
			var ties routing.Ties
			ties.Reset(1000) // displaced by a better candidate below
			ties.Reset(0)
			for i := 1; i < n; i++ {
				ties.Add(i, counting)
			}
			if ties.Len() != n {
				t.Fatalf("%d ties: Len() = %d", n, ties.Len())
			}
			counts[ties.Draw(counting)]++
		}
		for i, c := range counts {
			if c < rounds/2 || c > rounds*2 {
				t.Errorf("%d ties: tie %d drawn %d times in %d, want about %d", n, i, c, rounds*n, rounds)
			}
		}
		if chunks := (n + 63) / 64; n > 1 && draws > rounds*n*2*chunks {
			t.Errorf("%d ties: %d draws in %d decisions, want at most 2 per chunk of 64", n, draws, rounds*n)
		}
	}
}

func TestLowestPrefersLeastCostThenFewestInFlight(t *testing.T) {
	offers := []struct {
		cost     float64
		inFlight int64
	}{{3, 0}, {2, 5}, {2, 4}, {2, 4}, {2.5, 0}, {2, 4}, {2, 6}}
	seen := map[int]bool{}
	rnd := rand.New(rand.NewPCG(8, 8))
	for range 300 {
		var best routing.Lowest
		if best.Offered() {
			t.Fatal("the zero Lowest reports an offer")
		}
		for i, o := range offers {
			best.Offer(i, o.cost, o.inFlight, rnd.IntN)
		}
		i := best.Chosen(rnd.IntN)
		if i != 2 && i != 3 && i != 5 || best.Cost != 2 || best.InFlight != 4 {
			t.Fatalf("chose %d (cost %v, %d in flight), want one of 2, 3 and 5 (cost 2, 4 in flight)", i, best.Cost, best.InFlight)
		}
		seen[i] = true
	}
	if len(seen) != 3 {
		t.Errorf("chose only %v of the three ties in 300 decisions", seen)
	}
}
