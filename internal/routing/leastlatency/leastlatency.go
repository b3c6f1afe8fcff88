package leastlatency

import (
	"math"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/ttft"
)

// DefaultMaxTokens is the completion length assumed for a request that does not set
// one.
const DefaultMaxTokens = 128

// Router prefers candidates with a lower expected latency for the request, estimated as
// the package documentation states. It keeps the pooled speed of its candidate sets
// (ttft.Pooled) and is safe for concurrent use when its source of randomness is.
type Router struct {
	rnd    routing.Random
	pooled ttft.Pooled
}

var (
	_ routing.CellScorer = (*Router)(nil)
	_ routing.PodPicker  = (*Router)(nil)
)

// New returns a Router that breaks ties with rnd, which MUST be safe for concurrent use.
func New(rnd routing.Random) *Router {
	return &Router{rnd: rnd}
}

// lengths returns the prompt and completion tokens of rc's request, the latter
// DefaultMaxTokens when the request does not say.
func lengths(rc *routing.RoutingContext) (prompt, output float64) {
	if rc.MaxTokens <= 0 {
		return float64(rc.PromptTokens), DefaultMaxTokens
	}
	return float64(rc.PromptTokens), float64(rc.MaxTokens)
}

// Score sets the score of each known candidate to minus its expected latency in seconds
// and that of every unknown candidate to one less than the lowest known score. It
// returns routing.ErrUndecided, leaving scores unspecified, when no candidate with fresh
// metrics has a learnt speed.
func (*Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	est := ttft.New(cands, rc.Now)
	if !est.Learnt() {
		return routing.ErrUndecided
	}
	prompt, output := lengths(rc)
	for i := range cands {
		if cands[i].Metrics != nil {
			scores[i] = -est.Latency(&cands[i], prompt, output)
		}
	}
	routing.RankUnknownLast(cands, scores)
	return nil
}

// Pick returns the index of the candidate with fresh metrics and the least expected
// latency; among equal latencies, one with the fewest requests in flight (on engines
// with room, the latency does not depend on them, and a burst spreads as least-request
// spreads it); among those, one chosen uniformly at random. It returns
// routing.ErrUndecided when no candidate with fresh metrics has a learnt speed.
func (r *Router) Pick(rc *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	est := ttft.New(cands, rc.Now)
	if !est.Learnt() {
		return 0, routing.ErrUndecided
	}
	prompt, output := lengths(rc)
	var best routing.Lowest
	for i := range cands {
		if c := &cands[i]; c.Metrics != nil {
			best.Offer(i, est.Latency(c, prompt, output), c.InFlight, r.rnd)
		}
	}
	return best.Chosen(r.rnd), nil // a candidate's speed is learnt: it has metrics
}

// PickPod is Pick straight from the candidates' hot cells, among the pods e admits.
// Without an admission bound, the candidates' pooled speed comes from r's ttft.Pooled.
// It declines when no admitted pod with fresh metrics has a learnt speed, for Pick to
// return routing.ErrUndecided and the fallback to decide.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	cells, counts, limit, oldest := rc.Cells, rc.Counts, e.Bound(), e.Oldest(rc.Now)
	var fleet ttft.Fleet
	if limit == math.MaxInt64 {
		fleet = r.pooled.Fleet(cells, rc.Now, e.StaleAfter)
	} else {
		for i, h := range cells {
			if counts[i].Value() < limit {
				fleet.AddCell(h, oldest)
			}
		}
	}
	est := fleet.Estimator(rc.Now)
	if !est.Learnt() {
		return 0, 0, false
	}
	prompt, output := lengths(rc)
	var best routing.Lowest
	for i, h := range cells {
		if n := counts[i].Value(); n < limit && h.ScrapedAt() >= oldest {
			best.Offer(i, est.FromCell(h, rc.Candidates[i], n, prompt, output), n, r.rnd)
		}
	}
	if !best.Offered() { // the pool was learnt, but no admitted pod is fresh now
		return 0, 0, false
	}
	return best.Chosen(r.rnd), best.InFlight, true
}

// ScoreCells is Score straight from the hot cells of pods.
func (*Router) ScoreCells(rc *routing.RoutingContext, pods routing.Admitted, scores []float64) error {
	var fleet ttft.Fleet
	for _, i := range pods.Index {
		fleet.AddCell(rc.Cells[i], pods.Oldest)
	}
	est := fleet.Estimator(rc.Now)
	if !est.Learnt() {
		return routing.ErrUndecided
	}
	prompt, output := lengths(rc)
	for j, i := range pods.Index {
		if h := rc.Cells[i]; h.ScrapedAt() >= pods.Oldest {
			scores[j] = -est.FromCell(h, rc.Candidates[i], pods.InFlight[j], prompt, output)
		} else {
			scores[j] = math.NaN() // unknown
		}
	}
	routing.RankUnknownLastOf(scores[:len(pods.Index)])
	return nil
}
