package routing

import (
	"errors"
	"math"
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

// CellScorer is a Scorer that can also score straight from the hot cells of the pods a
// decision admits, building no Candidate, so that a weighted policy whose terms all are
// CellScorers decides as a PodPicker does.
type CellScorer interface {
	Scorer
	// ScoreCells sets scores[j] to the score Score would set for the Candidate of pod
	// pods.Index[j], with pods.InFlight[j] requests in flight, were the Candidates
	// exactly those of the pods listed. It fails as Score does.
	ScoreCells(rc *RoutingContext, pods Admitted, scores []float64) error
}

// Admitted lists the pods of one decision that an Eligibility admits, with the in-flight
// count read for each.
type Admitted struct {
	// Index holds indices in rc.Candidates and rc.Cells, ascending.
	Index []int
	// InFlight holds the count read for each, index for index.
	InFlight []int64
	// Oldest is the earliest scrape time of fresh metrics, in Unix nanoseconds
	// (Eligibility.Oldest).
	Oldest int64
}

// RankUnknownLastOf is RankUnknownLast for scores in which NaN marks a candidate without
// fresh metrics, as a CellScorer's may. It reports whether some score was not NaN; when
// none was, it leaves scores as they are.
func RankUnknownLastOf(scores []float64) bool {
	lowest, known := 0.0, false
	for _, s := range scores {
		if s == s && (!known || s < lowest) {
			lowest, known = s, true
		}
	}
	if !known {
		return false
	}
	for j, s := range scores {
		if s != s {
			scores[j] = lowest - 1
		}
	}
	return true
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
func (e Eligibility) Admits(inFlight int64) bool { return inFlight < e.Bound() }

// Bound returns the in-flight count from which pods are not admitted: Limit, or the
// largest count when there is no limit. A loop over many pods compares with it once per
// pod where Admits would also test for no limit.
func (e Eligibility) Bound() int64 {
	if e.Limit <= 0 {
		return math.MaxInt64
	}
	return e.Limit
}

// Oldest returns the earliest scrape time, in Unix nanoseconds, of the metrics that are
// fresh for a decision at now (endpoint.Summary.Known).
func (e Eligibility) Oldest(now time.Time) int64 { return now.Add(-e.StaleAfter).UnixNano() }

// Learner is implemented by algorithms that learn from each routed request, such as a
// prefix index or a session table. Learn is called once per request, after the chosen
// endpoint has been reserved, and once more, with the endpoint that served the request
// instead, if the data plane reports that a fallback did (Target.Served). It returns a
// Receipt when what it learnt can be corrected by what the engine reports about the
// request, nil otherwise.
type Learner interface {
	Learn(rc *RoutingContext, chosen *cache.Pod) Receipt
}

// PromptReader is implemented by algorithms that may read the text of the prompt
// (Request.Prompt); ReadsPrompt reports whether this one does. The data plane builds the
// text only for routers that read it (see the function ReadsPrompt); PromptTokens is
// always set.
type PromptReader interface {
	ReadsPrompt() bool
}

// ReadsPrompt reports whether x, an algorithm or a Router, reads the prompt's text: it
// is a PromptReader that says so.
func ReadsPrompt(x any) bool {
	r, ok := x.(PromptReader)
	return ok && r.ReadsPrompt()
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

// ReadsPrompt reports whether the scorer reads the prompt's text.
func (h highest) ReadsPrompt() bool { return ReadsPrompt(h.scorer) }

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

// Ties draws uniformly among the candidates tied for best during one pass, calling its
// source of randomness about twice per 64 ties rather than once per tie (reservoir
// sampling over chunks): the ties of the current chunk are recorded, and each full chunk
// yields one of them, uniformly, which replaces the pick so far with the chunk's share of
// all ties seen. The zero value has seen no tie; it belongs to one decision.
type Ties struct {
	n      int // ties seen
	picked int // the pick among the ties of the full chunks
	m      int // ties in the current chunk, buf[:m]
	buf    [64]int
}

// Reset makes i the only tie.
func (t *Ties) Reset(i int) {
	t.n, t.m, t.buf[0] = 1, 1, i
}

// Add records one more tie, i, drawing with rnd when a chunk fills.
func (t *Ties) Add(i int, rnd Random) {
	t.n++
	t.buf[t.m] = i
	if t.m++; t.m == len(t.buf) {
		t.fold(rnd)
	}
}

// Len returns the number of ties.
func (t *Ties) Len() int { return t.n }

// Draw returns one of the ties, each with the same probability; rnd is called only when
// there are several. There is at least one tie.
func (t *Ties) Draw(rnd Random) int {
	if t.m > 0 {
		t.fold(rnd)
	}
	return t.picked
}

// fold draws one tie of the current chunk and makes it the pick with the chunk's share
// of the ties seen, keeping the pick uniform over all of them; the chunk empties.
func (t *Ties) fold(rnd Random) {
	i := t.buf[0]
	if t.m > 1 {
		i = t.buf[rnd(t.m)]
	}
	if t.m == t.n || rnd(t.n) < t.m {
		t.picked = i
	}
	t.m = 0
}

// Lowest finds, in one pass, the candidate of least cost, then of fewest requests in
// flight, drawing among those still tied uniformly at random (Ties): least-latency's
// choice, least-request's among equal costs. The zero value has seen no candidate; it
// belongs to one decision.
type Lowest struct {
	// Cost and InFlight are the best's, valid once a candidate was offered.
	Cost     float64
	InFlight int64
	ties     Ties
}

// Offer considers candidate i, of cost and inFlight requests in flight, drawing with rnd
// when ties fill a chunk. A candidate that costs more than the best returns at once,
// inlined: in a large fleet most do.
func (l *Lowest) Offer(i int, cost float64, inFlight int64, rnd Random) {
	if cost > l.Cost && l.ties.n > 0 {
		return
	}
	l.offer(i, cost, inFlight, rnd)
}

// offer is Offer of a candidate that costs no more than the best.
func (l *Lowest) offer(i int, cost float64, inFlight int64, rnd Random) {
	switch {
	case l.ties.Len() == 0 || cost < l.Cost || cost == l.Cost && inFlight < l.InFlight:
		l.Cost, l.InFlight = cost, inFlight
		l.ties.Reset(i)
	case cost == l.Cost && inFlight == l.InFlight:
		l.ties.Add(i, rnd)
	}
}

// Offered reports whether a candidate was offered.
func (l *Lowest) Offered() bool { return l.ties.Len() > 0 }

// Chosen returns the index of the candidate chosen among those offered, at least one;
// every tie has the best's InFlight.
func (l *Lowest) Chosen(rnd Random) int { return l.ties.Draw(rnd) }
