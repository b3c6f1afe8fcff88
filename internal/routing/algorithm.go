package routing

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// ErrUndecided is returned by a Scorer or Picker that lacks the data to decide, such as
// engine metrics that are missing or stale; the router then asks the policy's fallback.
var ErrUndecided = errors.New("strategy cannot decide")

// Candidate is one endpoint as a routing algorithm sees it during one decision.
type Candidate struct {
	*cache.Pod
	// InFlight is the endpoint's in-flight request count read when the decision started.
	// The router reserves the chosen endpoint only if the count has not grown since.
	InFlight int64
	// Metrics is the endpoint's engine metrics snapshot if it is fresh, nil if it is
	// missing or stale (unknown).
	Metrics *endpoint.Metrics
}

// Scorer rates candidates for a request.
type Scorer interface {
	// Score sets scores[i] to the score of cands[i]; higher is better. Scores are
	// comparable only within one call. It returns ErrUndecided when it cannot rank the
	// candidates, for instance because every candidate's metrics are unknown.
	Score(rc *RoutingContext, cands []Candidate, scores []float64) error
}

// Picker chooses one candidate for a request. Algorithms that need more than "highest
// score wins", such as a load guard or a sticky table, implement it; Highest builds one
// from any Scorer.
type Picker interface {
	// Pick returns the index in cands of the chosen candidate, or ErrUndecided to defer
	// to the fallback. cands is never empty. Pick may be called again for the same
	// request if the chosen endpoint was reserved by another request meanwhile.
	Pick(rc *RoutingContext, cands []Candidate) (int, error)
}

// PodPicker is a Picker that can also choose straight from the context's candidates,
// reading only what it needs of each (the hot cell's counters and metric summary, rc.Cells),
// so that a decision builds no Candidate per endpoint. The router calls PickPod first
// and Pick when PickPod declines.
type PodPicker interface {
	Picker
	// PickPod returns the index in rc.Candidates of the chosen pod and the in-flight
	// count it read for it, choosing among the pods e admits as Pick would among their
	// Candidates. ok is false when it declines, such as when e admits no pod.
	// rc.Candidates is never empty. PickPod may be called again for the same request if
	// the chosen pod was reserved by another request meanwhile.
	PickPod(rc *RoutingContext, e Eligibility) (i int, inFlight int64, ok bool)
}

// Eligibility is how a PodPicker sees the pods as the router would offer them as
// Candidates: which it may choose, and which metrics are fresh.
type Eligibility struct {
	// Limit excludes pods with Limit or more requests in flight; 0 excludes none.
	Limit int64
	// StaleAfter is the age beyond which a pod's metrics are unknown.
	StaleAfter time.Duration
}

// Admits reports whether a pod with inFlight requests in flight may be chosen.
func (e Eligibility) Admits(inFlight int64) bool { return e.Limit <= 0 || inFlight < e.Limit }

// Oldest returns the earliest scrape time, in Unix nanoseconds, of the metrics that are
// fresh for a decision at now (endpoint.Summary.Known).
func (e Eligibility) Oldest(now time.Time) int64 { return now.Add(-e.StaleAfter).UnixNano() }

// Learner is implemented by algorithms that learn from each routed request, such as a
// prefix index or a session table. Learn is called once per request, after the chosen
// endpoint has been reserved. It returns a Receipt when what it learnt can be corrected
// by what the engine reports about the request, nil otherwise.
type Learner interface {
	Learn(rc *RoutingContext, chosen *cache.Pod) Receipt
}

// Receipt lets the engine's report on one routed request correct what a Learner learnt
// from it, such as prefix blocks the index expected the engine to hold.
type Receipt interface {
	// Settle is called at most once, when the engine's answer reported u.
	Settle(u Usage)
}

// Usage is what an engine reported about the prompt of a request it served.
type Usage struct {
	// PromptTokens is the prompt's length in the engine's tokens.
	PromptTokens int64
	// CachedTokens is how many of them the engine's prefix cache held.
	CachedTokens int64
}

// Random returns an integer in [0, n); it MUST be safe for concurrent use. Algorithms
// take one so that tests can seed their choices.
type Random func(n int) int

// DefaultRandom is the process-wide, concurrency-safe source of math/rand/v2.
var DefaultRandom Random = rand.IntN

// Highest returns a Picker that picks the candidate with the highest score, breaking ties
// uniformly at random with rnd.
func Highest(s Scorer, rnd Random) Picker {
	return highest{scorer: s, rnd: rnd}
}

type highest struct {
	scorer Scorer
	rnd    Random
}

func (h highest) Pick(rc *RoutingContext, cands []Candidate) (int, error) {
	scores := make([]float64, len(cands))
	if err := h.scorer.Score(rc, cands, scores); err != nil {
		return 0, err
	}
	return ArgMax(scores, h.rnd), nil
}

// ArgMax returns the index of the highest score, choosing uniformly at random with rnd
// among equal highest scores: one pass finds the highest score and counts its ties, a
// single draw picks one of them, and a second pass, which stops there, finds it. scores
// must not be empty.
func ArgMax(scores []float64, rnd Random) int {
	best, ties := scores[0], 1
	for _, s := range scores[1:] {
		switch {
		case s > best:
			best, ties = s, 1
		case s == best:
			ties++
		}
	}
	k := 0
	if ties > 1 {
		k = rnd(ties)
	}
	for i, s := range scores {
		if s == best {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return 0 // best is NaN (so is scores[0]): no score equals it
}

// RankUnknownLast sets the score of every candidate without fresh metrics to one less
// than the lowest score of the candidates with metrics, so that unknown candidates rank
// last while every score stays finite (a weighted policy normalises them). Scorers call
// it after scoring the known candidates; it leaves scores untouched when none is known.
func RankUnknownLast(cands []Candidate, scores []float64) {
	lowest, known := 0.0, false
	for i, c := range cands {
		if c.Metrics != nil && (!known || scores[i] < lowest) {
			lowest, known = scores[i], true
		}
	}
	if !known {
		return
	}
	for i, c := range cands {
		if c.Metrics == nil {
			scores[i] = lowest - 1
		}
	}
}

// Ties collects, during one pass over the candidates, the indices of those tied for best,
// so that one draw picks among them without a second pass. It records the first
// len(Ties.seen) ties; with more, Draw reports which tie was drawn and the caller finds it
// in a second pass. The zero value has seen no tie; it belongs to one decision.
type Ties struct {
	n    int
	seen [64]int32
}

// Reset makes i the only tie.
func (t *Ties) Reset(i int) { t.n, t.seen[0] = 1, int32(i) }

// Add records one more tie, i.
func (t *Ties) Add(i int) {
	if t.n < len(t.seen) {
		t.seen[t.n] = int32(i)
	}
	t.n++
}

// First returns the first tie's index.
func (t *Ties) First() int { return int(t.seen[0]) }

// Len returns the number of ties.
func (t *Ties) Len() int { return t.n }

// Draw draws one of the ties uniformly with rnd, which it calls only when there are
// several. It returns the drawn tie's rank k in pass order, and its index with ok true
// when recorded; when ok is false the caller finds the k-th tie (counting from 0) itself.
// There is at least one tie.
func (t *Ties) Draw(rnd Random) (k, i int, ok bool) {
	if t.n > 1 {
		k = rnd(t.n)
	}
	if k < len(t.seen) {
		return k, int(t.seen[k]), true
	}
	return k, 0, false
}
