package leastlatency

import (
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/ttft"
)

// DefaultMaxTokens is the completion length assumed for a request that does not set
// one.
const DefaultMaxTokens = 128

// Router prefers candidates with a lower expected latency for the request, estimated as
// the package documentation states. It is stateless and safe for concurrent use.
type Router struct{}

var _ routing.Scorer = (*Router)(nil)

// New returns a Router.
func New() *Router {
	return &Router{}
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
	promptTokens, maxTokens := float64(rc.PromptTokens), float64(rc.MaxTokens)
	if rc.MaxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	for i := range cands {
		if cands[i].Metrics != nil {
			scores[i] = -est.Latency(&cands[i], promptTokens, maxTokens)
		}
	}
	routing.RankUnknownLast(cands, scores)
	return nil
}
