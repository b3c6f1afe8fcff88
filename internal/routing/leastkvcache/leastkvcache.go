package leastkvcache

import (
	"cmp"

	"github.com/switchboard-llm/switchboard/internal/routing"
)

// unknownScore is the score of a candidate without fresh metrics; known candidates score
// in [0,1].
const unknownScore = -1

// Router prefers candidates with a less-used KV cache. It is stateless apart from its
// source of randomness and safe for concurrent use when that is.
type Router struct {
	rnd routing.Random
}

var (
	_ routing.Scorer = (*Router)(nil)
	_ routing.Picker = (*Router)(nil)
)

// New returns a Router that breaks ties with rnd, which MUST be safe for concurrent use.
func New(rnd routing.Random) *Router {
	return &Router{rnd: rnd}
}

// Pick returns the index of the candidate with fresh metrics and the lowest KV-cache
// usage; among equal usage, one with the fewest requests in flight; among those, one
// chosen uniformly at random. It returns routing.ErrUndecided when no candidate has
// fresh metrics.
func (r *Router) Pick(_ *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	best, ties := -1, 0
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		if best < 0 {
			best, ties = i, 1
			continue
		}
		switch compare(c, cands[best]) {
		case -1:
			best, ties = i, 1
		case 0:
			// Reservoir sampling: each of the equal candidates seen so far stays chosen
			// with probability 1/ties.
			ties++
			if r.rnd(ties) == 0 {
				best = i
			}
		}
	}
	if best < 0 {
		return 0, routing.ErrUndecided
	}
	return best, nil
}

// compare orders candidates with metrics by KV-cache usage, then by requests in flight.
func compare(a, b routing.Candidate) int {
	return cmp.Or(
		cmp.Compare(a.Metrics.KVCacheUsage, b.Metrics.KVCacheUsage),
		cmp.Compare(a.InFlight, b.InFlight),
	)
}

// Score sets the score of each candidate with fresh metrics to the free fraction of its
// KV cache, 1 - KVCacheUsage, in [0,1], and that of every other candidate to -1. It
// returns routing.ErrUndecided, leaving scores unspecified, when no candidate has fresh
// metrics.
func (r *Router) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	known := false
	for i, c := range cands {
		if c.Metrics == nil {
			scores[i] = unknownScore
			continue
		}
		known = true
		scores[i] = 1 - min(max(c.Metrics.KVCacheUsage, 0), 1)
	}
	if !known {
		return routing.ErrUndecided
	}
	return nil
}
