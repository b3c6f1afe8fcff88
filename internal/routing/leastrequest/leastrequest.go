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
// declines only when e admits none. Counts that change between its two passes may leave
// the drawn tie unfound; it then takes the pod of the least count it saw first, whose
// count the reservation checks anyway.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	first, least, ties := leastOf(rc.Counts, e.Bound())
	if first < 0 {
		return 0, 0, false
	}
	if k := r.draw(ties); k > 0 {
		if i, ok := nthAfter(rc.Counts, first, least, k); ok {
			return i, least, true
		}
	}
	return first, least, true
}

// leastOf returns the first of counts with the least value below bound, that value and
// how many of counts have it; first is -1 when none is below bound. bound is where the
// least starts, so that the first count below it resets the ties counted at it before,
// and one comparison admits a count and ranks it.
func leastOf(counts []*cache.Count, bound int64) (first int, least int64, ties int) {
	first, least = -1, bound
	for i, c := range counts {
		switch n := c.Value(); {
		case n < least:
			first, least, ties = i, n, 1
		case n == least:
			ties++
		}
	}
	return first, least, ties
}

// nthAfter returns the index of the k-th count after counts[first] whose value is least,
// and false when fewer than k are.
func nthAfter(counts []*cache.Count, first int, least int64, k int) (int, bool) {
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
