package roundrobin

import (
	"sync/atomic"

	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Router hands out turns in candidate order. Decision k (counting from 0 over the
// Router's lifetime, whether through Pick or Score) goes to candidate k mod n, where n
// is the number of candidates offered to that decision. While the candidate set is
// stable, every candidate gets one decision in n; when it changes, the rotation goes on
// over the new set from the current turn.
//
// Synchronisation model: the turn counter is an atomic incremented once per decision,
// so the Router is safe for concurrent use and takes no lock.
type Router struct {
	next atomic.Uint64
}

var (
	_ routing.Scorer    = (*Router)(nil)
	_ routing.PodPicker = (*Router)(nil)
)

// New returns a Router whose first decision goes to the first candidate.
func New() *Router {
	return &Router{}
}

// Pick returns the index of the candidate whose turn it is and advances the turn. It
// never fails. A retried decision takes the next turn.
func (r *Router) Pick(_ *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	return r.turn(len(cands)), nil
}

// PickPod returns the index of the pod whose turn it is, with its in-flight count, and
// advances the turn; it declines when e does not admit that pod, for Pick to take
// the next turn among the pods below it. It reads one counter.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	i := r.turn(len(rc.Cells))
	n := rc.InFlight(i)
	return i, n, e.Admits(n)
}

// Score sets the score of the candidate whose turn it is to 1 and every other score to
// 0, and advances the turn. It never fails.
func (r *Router) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	clear(scores[:len(cands)])
	scores[r.turn(len(cands))] = 1
	return nil
}

// turn takes the next turn and returns its index among n candidates; n > 0.
func (r *Router) turn(n int) int {
	return int((r.next.Add(1) - 1) % uint64(n))
}
