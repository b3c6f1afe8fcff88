package leastlatency

import (
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
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
// returns routing.ErrUndecided, leaving scores unspecified, when no candidate has fresh
// metrics or none is observed.
func (*Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	var fleet profile
	observedCount := 0
	for _, c := range cands {
		if c.Metrics == nil {
			continue
		}
		if p, ok := observe(c.Metrics); ok {
			fleet = fleet.plus(p)
			observedCount++
		}
	}
	if observedCount == 0 {
		return routing.ErrUndecided
	}
	fleet = fleet.times(1 / float64(observedCount))

	promptTokens, maxTokens := float64(rc.PromptTokens), float64(rc.MaxTokens)
	if rc.MaxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		p, ok := observe(c.Metrics)
		if !ok {
			p = fleet
		}
		scores[i] = -p.latency(c, promptTokens, maxTokens)
	}
	routing.RankUnknownLast(cands, scores)
	return nil
}

// profile is an endpoint's observed speed, in seconds.
type profile struct {
	// prefill is the time to first token per prompt token.
	prefill float64
	// decode is the time per output token.
	decode float64
	// service is the mean end-to-end latency of a request.
	service float64
}

// observe returns the speed m shows, and false if m lacks the observations to show it.
func observe(m *endpoint.Metrics) (profile, bool) {
	if m.TTFT.Count == 0 || m.TPOT.Count == 0 || m.E2E.Count == 0 || m.PromptTokens <= 0 {
		return profile{}, false
	}
	return profile{prefill: m.TTFT.Sum / m.PromptTokens, decode: m.TPOT.Mean(), service: m.E2E.Mean()}, true
}

// plus returns the component-wise sum of p and q.
func (p profile) plus(q profile) profile {
	return profile{prefill: p.prefill + q.prefill, decode: p.decode + q.decode, service: p.service + q.service}
}

// times returns p with every component multiplied by k.
func (p profile) times(k float64) profile {
	return profile{prefill: p.prefill * k, decode: p.decode * k, service: p.service * k}
}

// latency returns the expected latency in seconds of a request with promptTokens and
// maxTokens on candidate c, whose metrics are known, at speed p.
func (p profile) latency(c routing.Candidate, promptTokens, maxTokens float64) float64 {
	m := c.Metrics
	ahead := m.Waiting + max(0, float64(c.InFlight)-m.Running-m.Waiting)
	queue := ahead / max(m.Running, 1) * p.service
	return queue + promptTokens*p.prefill + maxTokens*p.decode
}
