package leastkvcache

import (
	"cmp"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
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
	_ routing.Scorer    = (*Router)(nil)
	_ routing.PodPicker = (*Router)(nil)
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

// PickPod is Pick straight from the pods, among those e admits: one pass finds the least
// projected usage and counts its ties, a single draw picks one of them, and a second pass
// finds it. It declines when no admitted pod has fresh metrics, for Pick to return
// routing.ErrUndecided and the fallback to decide. Metrics that change between the two
// passes may leave the drawn tie unfound; it then takes the first best pod, whose count
// the reservation checks anyway.
func (r *Router) PickPod(rc *routing.RoutingContext, pods []*cache.Pod, e routing.Eligibility) (int, int64, bool) {
	v := podView{rc: rc, e: e, oldest: rc.Now.Add(-e.StaleAfter)}
	first, ties := -1, 0
	var best projection
	for i, p := range pods {
		c, ok := v.project(p)
		if !ok {
			continue
		}
		if first < 0 {
			first, best, ties = i, c, 1
			continue
		}
		switch c.compare(best) {
		case -1:
			first, best, ties = i, c, 1
		case 0:
			ties++
		}
	}
	if first < 0 {
		return 0, 0, false
	}
	if ties > 1 {
		for k, i := r.rnd(ties), first+1; k > 0 && i < len(pods); i++ {
			if c, ok := v.project(pods[i]); ok && c.compare(best) == 0 {
				if k--; k == 0 {
					return i, c.inFlight, true
				}
			}
		}
	}
	return first, best.inFlight, true
}

// projection is a pod's projected KV-cache usage and in-flight count.
type projection struct {
	usage    float64
	inFlight int64
}

// compare orders projections as compare orders candidates.
func (a projection) compare(b projection) int {
	return cmp.Or(cmp.Compare(a.usage, b.usage), cmp.Compare(a.inFlight, b.inFlight))
}

// podView projects pods for one PickPod call, remembering the request's cache share for
// the last cache geometry seen (pods of a pool share one).
type podView struct {
	rc     *routing.RoutingContext
	e      routing.Eligibility
	oldest time.Time
	// blockSize and blocks are the geometry share was computed for.
	blockSize, blocks int64
	share             float64
}

// project returns p's projection if e admits p and its metrics are fresh.
func (v *podView) project(p *cache.Pod) (projection, bool) {
	n := p.Load().InFlight()
	if !v.e.Admits(n) {
		return projection{}, false
	}
	m := p.Metrics()
	if m == nil || m.ScrapedAt.Before(v.oldest) {
		return projection{}, false
	}
	if int64(m.BlockSize) != v.blockSize || int64(m.NumGPUBlocks) != v.blocks || v.share == 0 {
		v.blockSize, v.blocks = int64(m.BlockSize), int64(m.NumGPUBlocks)
		v.share = requestShare(v.rc, m)
	}
	return projection{usage: max(m.KVCacheUsage, 0) + float64(n)*v.share, inFlight: n}, true
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
	return max(c.Metrics.KVCacheUsage, 0) + float64(c.InFlight)*requestShare(rc, c.Metrics)
}

// requestShare is the share of m's KV cache that a request like rc's takes: its prompt
// and completion tokens in blocks, over the engine's blocks; or defaultRequestShare when
// the engine does not report its cache geometry.
func requestShare(rc *routing.RoutingContext, m *endpoint.Metrics) float64 {
	if m.BlockSize <= 0 || m.NumGPUBlocks <= 0 {
		return defaultRequestShare
	}
	tokens := rc.PromptTokens + max(rc.MaxTokens, 0)
	blocks := (tokens + int64(m.BlockSize) - 1) / int64(m.BlockSize)
	return float64(max(blocks, 1)) / float64(m.NumGPUBlocks)
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
