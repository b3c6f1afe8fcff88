package leastrequest

import (
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Router prefers candidates with fewer requests in flight. It is safe for concurrent use
// when its source of randomness is.
type Router struct {
	rnd routing.Random
}

var (
	_ routing.CellScorer = (*Router)(nil)
	_ routing.PodPicker  = (*Router)(nil)
)

// New returns a Router that breaks ties with rnd, which MUST be safe for concurrent use.
func New(rnd routing.Random) *Router {
	return &Router{rnd: rnd}
}

// Score sets each candidate's score to minus its number of requests in flight. It never
// fails.
func (*Router) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	for i, c := range cands {
		scores[i] = -float64(c.InFlight)
	}
	return nil
}

// ScoreCells is Score for pods.
func (*Router) ScoreCells(_ *routing.RoutingContext, pods routing.Admitted, scores []float64) error {
	for j, n := range pods.InFlight {
		scores[j] = -float64(n)
	}
	return nil
}

// Pick returns the index of a candidate with the fewest requests in flight, chosen
// uniformly among equals. It never fails.
func (r *Router) Pick(_ *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	least, ties := cands[0].InFlight, 1
	for _, c := range cands[1:] {
		switch {
		case c.InFlight < least:
			least, ties = c.InFlight, 1
		case c.InFlight == least:
			ties++
		}
	}
	k := r.draw(ties)
	for i, c := range cands {
		if c.InFlight == least {
			if k == 0 {
				return i, nil
			}
			k--
		}
	}
	return 0, nil // unreachable: some candidate has the least count
}

// PickPod is Pick over the candidates' in-flight counters, among those e admits. It
// declines only when e admits none. It finds the drawn tie in a second pass unless the
// ties lie side by side (leastOf); counts that change between the passes may leave that
// tie unfound, and it then takes the pod of the least count it saw first, whose count
// the reservation checks anyway.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	s := leastOf(rc.Counts, e.Bound())
	if s.first < 0 {
		return 0, 0, false
	}
	k := r.draw(s.ties)
	if s.last-s.first+1 == s.ties { // every count from first to last is a tie
		return s.first + k, s.least, true
	}
	if i, ok := nthAfter(rc.Counts, s.first, s.least, k); ok {
		return i, s.least, true
	}
	return s.first, s.least, true
}

// leastScan is what one pass over in-flight counts finds: the least of them below a
// bound, how many have it (ties), and the first and last of those (-1 when none is below
// the bound).
type leastScan struct {
	first, last int
	least       int64
	ties        int
}

// leastOf scans counts for those with the least value below bound. bound is where the
// least starts, so that the first count below it resets the ties counted at it before,
// and one comparison admits a count and ranks it. When the ties are all the counts from
// the first to the last of them, as on an idle or evenly loaded fleet, the k-th tie is
// found without a second pass.
func leastOf(counts []*cache.Count, bound int64) leastScan {
	s := leastScan{first: -1, last: -1, least: bound}
	for i, c := range counts {
		switch n := c.Value(); {
		case n < s.least:
			s = leastScan{first: i, last: i, least: n, ties: 1}
		case n == s.least:
			s.last = i
			s.ties++
		}
	}
	return s
}

// nthAfter returns the index of the k-th count after counts[first] whose value is least
// (counts[first] itself for k = 0), and false when fewer than k are.
func nthAfter(counts []*cache.Count, first int, least int64, k int) (int, bool) {
	if k == 0 {
		return first, true
	}
	for i := first + 1; i < len(counts); i++ {
		if counts[i].Value() == least {
			if k--; k == 0 {
				return i, true
			}
		}
	}
	return 0, false
}

// draw returns a uniform index among ties equal candidates, drawing only when there are
// several.
func (r *Router) draw(ties int) int {
	if ties > 1 {
		return r.rnd(ties)
	}
	return 0
}
