package leastkvcache

import (
	"math"

	"github.com/switchboard-llm/switchboard/internal/cache"
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
	_ routing.CellScorer = (*Router)(nil)
	_ routing.PodPicker  = (*Router)(nil)
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
	best := -1
	var ties routing.Ties
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		if best >= 0 {
			switch compare(rc, c, cands[best]) {
			case 1:
				continue
			case 0:
				ties.Add(i, r.rnd)
				continue
			}
		}
		best = i
		ties.Reset(i)
	}
	if best < 0 {
		return 0, routing.ErrUndecided
	}
	return ties.Draw(r.rnd), nil
}

// PickPod is Pick straight from the candidates' hot cells, among the pods e admits, in
// one pass that finds the least projected usage and draws among its ties. It declines
// when no admitted pod has fresh metrics, for Pick to return routing.ErrUndecided and the
// fallback to decide.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	cells, counts, oldest := rc.Cells, rc.Counts, e.Oldest(rc.Now)
	g := shareOf{rc: rc, share: defaultRequestShare}
	var ties routing.Ties
	best := worst // until the first admitted pod, which is less
	limit := e.Bound()
	for i, h := range cells {
		// Requests in flight only add to a pod's usage: most pods of a large fleet are
		// worse than the best on their usage alone, whatever their count or age.
		if h.PeekUsage() > best.usage {
			continue
		}
		n := counts[i].Value()
		if n >= limit {
			continue
		}
		at, usage := h.Usage()
		if at < oldest { // a pod never scraped has 0
			continue
		}
		c := projection{usage: g.projected(h, usage, n), inFlight: n}
		if !c.less(best) { // worse than the best, or tied
			if !best.less(c) {
				ties.Add(i, r.rnd)
			}
			continue
		}
		best = c
		ties.Reset(i)
	}
	if ties.Len() == 0 {
		return 0, 0, false
	}
	return ties.Draw(r.rnd), best.inFlight, true // every tie has best's count
}

// projection is a pod's projected KV-cache usage and in-flight count.
type projection struct {
	usage    float64
	inFlight int64
}

// worst ranks above every pod's projection, since a pod's usage is finite and its count
// below math.MaxInt64.
var worst = projection{usage: math.Inf(1), inFlight: math.MaxInt64}

// less orders projections as compare orders candidates.
func (a projection) less(b projection) bool {
	return a.usage < b.usage || a.usage == b.usage && a.inFlight < b.inFlight
}

// shareOf is the cache share of one PickPod call's request for the last cache geometry
// seen (pods of a pool share one): the zero geometry's at first.
type shareOf struct {
	rc                *routing.RoutingContext
	blockSize, blocks int64
	share             float64
}

// projected returns usage, h's scraped usage, with the share of n requests in flight
// added. Only then, for n > 0, does it read h's cache geometry (see of).
func (g *shareOf) projected(h *cache.Hot, usage float64, n int64) float64 {
	if n > 0 {
		usage += float64(n) * g.of(h)
	}
	return usage
}

// of returns the share for h's cache geometry, computed anew only when it differs from
// the last one's.
func (g *shareOf) of(h *cache.Hot) float64 {
	if bs, nb := h.Geometry(); bs != g.blockSize || nb != g.blocks {
		g.blockSize, g.blocks = bs, nb
		g.share = requestShare(g.rc, bs, nb)
	}
	return g.share
}

// compare orders candidates with metrics by projected KV-cache usage, then by requests
// in flight.
func compare(rc *routing.RoutingContext, a, b routing.Candidate) int {
	pa := projection{usage: projectedUsage(rc, a), inFlight: a.InFlight}
	pb := projection{usage: projectedUsage(rc, b), inFlight: b.InFlight}
	switch {
	case pa.less(pb):
		return -1
	case pb.less(pa):
		return 1
	}
	return 0
}

// projectedUsage estimates c's KV-cache usage with the requests the gateway has in flight
// on it: the scraped usage plus, per request in flight, the cache share of a request
// like rc's (its prompt and completion tokens in blocks, over the engine's blocks; or
// defaultRequestShare when the engine does not report its cache geometry). Without it,
// requests sent since the last scrape are invisible and a burst piles onto the endpoint
// that looked emptiest. c.Metrics must not be nil.
func projectedUsage(rc *routing.RoutingContext, c routing.Candidate) float64 {
	return c.Metrics.UsedKVCache() + float64(c.InFlight)*requestShare(rc, int64(c.Metrics.BlockSize), int64(c.Metrics.NumGPUBlocks))
}

// requestShare is the share of an engine's KV cache of numBlocks blocks of blockSize
// tokens that a request like rc's takes: its prompt and completion tokens in blocks, over
// the engine's blocks; or defaultRequestShare when the engine does not report its cache
// geometry.
func requestShare(rc *routing.RoutingContext, blockSize, numBlocks int64) float64 {
	if blockSize <= 0 || numBlocks <= 0 {
		return defaultRequestShare
	}
	tokens := rc.PromptTokens + max(rc.MaxTokens, 0)
	blocks := (tokens + blockSize - 1) / blockSize
	return float64(max(blocks, 1)) / float64(numBlocks)
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

// ScoreCells is Score straight from the hot cells of pods.
func (r *Router) ScoreCells(rc *routing.RoutingContext, pods routing.Admitted, scores []float64) error {
	g := shareOf{rc: rc, share: defaultRequestShare}
	for j, i := range pods.Index {
		h := rc.Cells[i]
		at, usage := h.Usage()
		if at < pods.Oldest {
			scores[j] = math.NaN() // unknown
			continue
		}
		scores[j] = 1 - g.projected(h, usage, pods.InFlight[j])
	}
	if !routing.RankUnknownLastOf(scores[:len(pods.Index)]) {
		return routing.ErrUndecided
	}
	return nil
}
