package random

import (
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// scoreResolution is the number of equally spaced values in [0,1) that Score draws from.
// It fits in an int on every platform; equal draws are broken at random by
// routing.ArgMax, so the resolution does not bias the choice.
const scoreResolution = 1 << 30

// Router picks candidates uniformly at random. It is safe for concurrent use when its
// source of randomness is.
type Router struct {
	rnd routing.Random
}

var (
	_ routing.Scorer    = (*Router)(nil)
	_ routing.PodPicker = (*Router)(nil)
)

// New returns a Router that draws from rnd, which MUST be safe for concurrent use.
func New(rnd routing.Random) *Router {
	return &Router{rnd: rnd}
}

// PickPod returns a pod index chosen uniformly at random, with the pod's in-flight count;
// it declines when e does not admit that pod, for Pick to choose among the pods
// below it. It reads one counter.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	i := r.rnd(len(rc.Cells))
	n := rc.InFlight(i)
	return i, n, e.Admits(n)
}

// Pick returns an index into cands chosen uniformly at random. It never fails.
func (r *Router) Pick(_ *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	return r.rnd(len(cands)), nil
}

// Score sets each candidate's score to an independent uniform draw in [0,1), so that the
// highest-scoring candidate is uniformly random. It never fails.
func (r *Router) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	for i := range cands {
		scores[i] = float64(r.rnd(scoreResolution)) / scoreResolution
	}
	return nil
}
