package weighted

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Term is one strategy's part in a weighted decision.
type Term struct {
	// Name identifies the term in errors, such as the strategy's name.
	Name string
	// Scorer rates the candidates. Required.
	Scorer routing.Scorer
	// Weight is the term's share of the total: a finite number, zero or more. A term of
	// weight zero is never asked to score.
	Weight float64
}

// Router combines the scores of weighted terms. It is safe for concurrent use if its
// terms' scorers are.
//
// For each decision, every term scores the candidates; a term's scores are normalised
// to [0, 1] relative to their magnitude (see addNormalised: the highest 1, the others
// less by their shortfall over the largest of the scores' range and absolute values;
// +Inf counts as 1, -Inf and NaN as 0) and multiplied by its weight; a candidate's
// total is the sum over the terms. A term that returns routing.ErrUndecided
// adds nothing; if every term does, the Router returns routing.ErrUndecided.
//
// When every term's scorer is a routing.CellScorer, a decision reads the pods' hot cells
// (PickPod) into buffers kept from one decision to the next, and builds no Candidate.
type Router struct {
	// terms are the terms of positive weight.
	terms []Term
	// cells holds the terms' scorers as CellScorers, index for index, when every one is;
	// nil otherwise.
	cells []routing.CellScorer
	// learners are the terms' scorers that learn from routed requests.
	learners []routing.Learner
	rnd      routing.Random
	// buffers holds *buffers for PickPod.
	buffers sync.Pool
}

var (
	_ routing.Scorer    = (*Router)(nil)
	_ routing.PodPicker = (*Router)(nil)
	_ routing.Learner   = (*Router)(nil)
)

// New returns a Router over terms; rnd breaks ties between equal totals. It returns an
// error if rnd is nil, there are no terms, a term has no scorer or a negative or
// non-finite weight, or every weight is zero.
func New(terms []Term, rnd routing.Random) (*Router, error) {
	if rnd == nil {
		return nil, errors.New("weighted router needs a Random")
	}
	if len(terms) == 0 {
		return nil, errors.New("weighted router needs at least one term")
	}
	r := &Router{rnd: rnd}
	for _, t := range terms {
		switch {
		case t.Scorer == nil:
			return nil, fmt.Errorf("term %q has no scorer", t.Name)
		case t.Weight < 0 || math.IsNaN(t.Weight) || math.IsInf(t.Weight, 0):
			return nil, fmt.Errorf("term %q has weight %v, want a finite number >= 0", t.Name, t.Weight)
		case t.Weight == 0:
			continue
		}
		r.terms = append(r.terms, t)
		if l, ok := t.Scorer.(routing.Learner); ok {
			r.learners = append(r.learners, l)
		}
	}
	if len(r.terms) == 0 {
		return nil, errors.New("weighted router needs a term of positive weight")
	}
	for _, t := range r.terms {
		c, ok := t.Scorer.(routing.CellScorer)
		if !ok {
			r.cells = nil
			break
		}
		r.cells = append(r.cells, c)
	}
	return r, nil
}

// ReadsPrompt reports whether a term's scorer reads the prompt's text.
func (r *Router) ReadsPrompt() bool {
	return slices.ContainsFunc(r.terms, func(t Term) bool { return routing.ReadsPrompt(t.Scorer) })
}

// Score sets scores[i] to the weighted total of cands[i], between 0 and the sum of the
// weights. It returns routing.ErrUndecided if every term is undecided, and the error of
// a term that fails otherwise.
func (r *Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	return r.total(rc, cands, scores, make([]float64, len(cands)))
}

// Pick returns the index of the candidate with the highest weighted total, chosen at
// random among equal totals. It fails as Score does.
func (r *Router) Pick(rc *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	buf := make([]float64, 2*len(cands))
	totals := buf[:len(cands)]
	if err := r.total(rc, cands, totals, buf[len(cands):]); err != nil {
		return 0, err
	}
	return routing.ArgMax(totals, r.rnd), nil
}

// PickPod is Pick straight from the hot cells of the pods e admits, when every term's
// scorer is a routing.CellScorer. It declines otherwise, when e admits no pod, and when
// Pick would fail, for Pick to say why.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	if r.cells == nil {
		return 0, 0, false
	}
	b, _ := r.buffers.Get().(*buffers)
	if b == nil {
		b = new(buffers)
	}
	defer r.buffers.Put(b)
	pods := routing.Admitted{Index: b.index[:0], InFlight: b.inFlight[:0], Oldest: e.Oldest(rc.Now)}
	limit := e.Bound()
	for i, c := range rc.Counts {
		if n := c.Value(); n < limit {
			pods.Index, pods.InFlight = append(pods.Index, i), append(pods.InFlight, n)
		}
	}
	b.index, b.inFlight = pods.Index, pods.InFlight
	n := len(pods.Index)
	if n == 0 {
		return 0, 0, false
	}
	b.scores = slices.Grow(b.scores[:0], 2*n)[:2*n]
	totals := b.scores[:n]
	if err := r.combine(totals, b.scores[n:], func(k int, scores []float64) error {
		return r.cells[k].ScoreCells(rc, pods, scores)
	}); err != nil {
		return 0, 0, false
	}
	j := routing.ArgMax(totals, r.rnd)
	return pods.Index[j], pods.InFlight[j], true
}

// buffers are what one PickPod call writes, kept for the next.
type buffers struct {
	index    []int
	inFlight []int64
	scores   []float64 // the totals, then one term's scores
}

// Learn passes the routed request on to every term that learns and returns their
// receipts as one.
func (r *Router) Learn(rc *routing.RoutingContext, chosen *cache.Pod) routing.Receipt {
	var first routing.Receipt
	var all receipts // made only for a second receipt
	for _, l := range r.learners {
		switch rec := l.Learn(rc, chosen); {
		case rec == nil:
		case first == nil:
			first = rec
		default:
			all = append(all, rec)
		}
	}
	if all == nil {
		return first
	}
	return append(all, first)
}

// receipts settles several terms' receipts.
type receipts []routing.Receipt

func (rs receipts) Settle(u routing.Usage) {
	for _, r := range rs {
		r.Settle(u)
	}
}

// total sets totals to the candidates' weighted totals, using scratch, as long as
// cands, for one term's scores at a time.
func (r *Router) total(rc *routing.RoutingContext, cands []routing.Candidate, totals, scratch []float64) error {
	return r.combine(totals, scratch, func(k int, scores []float64) error {
		return r.terms[k].Scorer.Score(rc, cands, scores)
	})
}

// combine sets totals to the weighted totals of the terms' scores, which score writes
// into scratch (as long as totals) for the k-th term, one term at a time.
func (r *Router) combine(totals, scratch []float64, score func(k int, scores []float64) error) error {
	clear(totals)
	decided := false
	for k, t := range r.terms {
		err := score(k, scratch)
		if errors.Is(err, routing.ErrUndecided) {
			continue
		}
		if err != nil {
			return fmt.Errorf("score %s: %w", t.Name, err)
		}
		decided = true
		addNormalised(totals, scratch, t.Weight)
	}
	if !decided {
		return routing.ErrUndecided
	}
	return nil
}

// addNormalised adds to totals the scores mapped onto [0, weight] without reversing
// their order and in proportion to how far each falls short of the highest, relative
// to the scores' magnitude: a finite score s adds weight × (1 − (hi − s) / r), where hi
// and lo are the highest and lowest finite scores and r = max(hi − lo, |hi|, |lo|).
// Scores that differ by a few percent of their size thus differ by a few percent of the
// weight, not by all of it as under min–max scaling; and a term cannot make a small
// difference absolute. Equal finite scores add weight; +Inf adds weight; -Inf and NaN
// add 0.
func addNormalised(totals, scores []float64, weight float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range scores {
		// Compared directly: min and max would test each score for NaN and signed zero,
		// which finite has ruled out or which cannot change the result.
		if finite(s) {
			if s < lo {
				lo = s
			}
			if s > hi {
				hi = s
			}
		}
	}
	r := max(hi-lo, math.Abs(hi), math.Abs(lo))
	perUnit := 0.0 // r == 0: every finite score is zero, each the highest
	if r > 0 {
		perUnit = weight / r // a multiplication per score instead of a division
	}
	for i, s := range scores {
		switch {
		case finite(s):
			totals[i] += weight - (hi-s)*perUnit
		case s > 0: // +Inf
			totals[i] += weight
		}
	}
}

// finite reports whether x is neither infinite nor NaN.
func finite(x float64) bool { return x-x == 0 }
