package roundrobin

import (
	"sync/atomic"

	"github.com/switchboard-llm/switchboard/internal/percore"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Router hands out turns in candidate order. Turn k (counting from 0 over the Router's
// lifetime) goes to candidate k mod n, where n is the number of candidates offered to
// the decision that takes it, whether through Pick, PickPod or Score. While the candidate
// set is stable, every candidate gets one turn in n; when it changes, the rotation goes
// on over the new set from the current turn.
//
// Over fewer than SpanCandidates candidates, each decision takes the next turn, so that
// decisions made one after another, from any goroutine, go round in strict order. Over
// more, decisions take their turns from spans of SpanTurns turns, one span at a time for
// each core (percore.Stripes), so that decisions on different cores write no counter in
// common and those made at once go to different parts of the rotation; the rotation of
// spans is a second one, which the first resumes from where it stood when the candidates
// are fewer again. Every turn of a span is taken, except those of a span whose core
// stops deciding (at most SpanTurns-1 for each of percore.StripeCount stripes) and,
// rarely, a whole span that two decisions sharing a stripe both took a new span for:
// each such span leaves each candidate at most one turn short.
//
// Synchronisation model: the counters are atomics, and a stripe's turn advances by
// compare-and-swap, so the Router is safe for concurrent use and takes no lock.
type Router struct {
	next  atomic.Uint64 // the next turn, over fewer than SpanCandidates
	spans atomic.Uint64 // the turns spans took, over more
	// turns holds each stripe's next turn; at a multiple of SpanTurns, its span is used up.
	turns percore.Stripes[atomic.Uint64]
}

// SpanCandidates is the least number of candidates that decisions take their turns from
// spans for (see Router): where a span's turns are a small share of a rotation.
const SpanCandidates = 256

// SpanTurns is the number of turns a span holds.
const SpanTurns = 16

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
	if n < SpanCandidates {
		return int((r.next.Add(1) - 1) % uint64(n))
	}
	stripe := r.turns.Local()
	for {
		seen := stripe.Load()
		k := seen
		if k%SpanTurns == 0 { // the span is used up: take a new one, a multiple of SpanTurns
			k = r.spans.Add(SpanTurns) - SpanTurns
		}
		if stripe.CompareAndSwap(seen, k+1) {
			return int(k % uint64(n))
		}
	}
}
