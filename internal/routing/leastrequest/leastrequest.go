package leastrequest

import "github.com/switchboard-llm/switchboard/internal/routing"

// Router prefers candidates with fewer requests in flight. It is stateless and safe for
// concurrent use.
type Router struct{}

var _ routing.Scorer = (*Router)(nil)

// New returns a Router.
func New() *Router {
	return &Router{}
}

// Score sets each candidate's score to minus its number of requests in flight. It never
// fails.
func (*Router) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	for i, c := range cands {
		scores[i] = -float64(c.InFlight)
	}
	return nil
}
