package leastkvcache

import (
	"cmp"

	"github.com/switchboard-llm/switchboard/internal/routing"
)

// defaultRequestShare is the share of an engine's KV cache counted for each request in
// flight when the engine does not report its cache geometry.
const defaultRequestShare = 0.01

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
func (r *Router) Pick(rc *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	best, ties := -1, 0
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		if best < 0 {
			best, ties = i, 1
			continue
		}
		switch compare(rc, c, cands[best]) {
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

// compare orders candidates with metrics by projected KV-cache usage, then by requests
// in flight.
func compare(rc *routing.RoutingContext, a, b routing.Candidate) int {
	return cmp.Or(
		cmp.Compare(projectedUsage(rc, a), projectedUsage(rc, b)),
		cmp.Compare(a.InFlight, b.InFlight),
	)
}

// projectedUsage estimates c's KV-cache usage with the requests the gateway has in flight
// on it: the scraped usage plus, per request in flight, the cache share of a request
// like rc's (its prompt and completion tokens in blocks, over the engine's blocks; or
// defaultRequestShare when the engine does not report its cache geometry). Without it,
// requests sent since the last scrape are invisible and a burst piles onto the endpoint
// that looked emptiest. c.Metrics must not be nil.
func projectedUsage(rc *routing.RoutingContext, c routing.Candidate) float64 {
	m := c.Metrics
	share := defaultRequestShare
	if m.BlockSize > 0 && m.NumGPUBlocks > 0 {
		tokens := rc.PromptTokens + max(rc.MaxTokens, 0)
		blocks := (tokens + int64(m.BlockSize) - 1) / int64(m.BlockSize)
		share = float64(max(blocks, 1)) / float64(m.NumGPUBlocks)
	}
	return max(m.KVCacheUsage, 0) + float64(c.InFlight)*share
}

// Score sets the score of each candidate with fresh metrics to its projected free KV
// cache, 1 - projected usage (below 0 once the projection exceeds the cache), and that
// of every other candidate to one less than the lowest known score. It returns
// routing.ErrUndecided, leaving scores unspecified, when no candidate has fresh metrics.
func (r *Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	known := false
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		scores[i] = 1 - projectedUsage(rc, c)
		known = true
	}
	if !known {
		return routing.ErrUndecided
	}
	routing.RankUnknownLast(cands, scores)
	return nil
}
