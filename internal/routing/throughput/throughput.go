package throughput

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

const (
	// Retention is how long a Router remembers an endpoint after the scrape time of its
	// latest snapshot seen.
	Retention = 5 * time.Minute
	// pruneEvery is how often, at most, a decision sweeps forgotten endpoints out of
	// the history.
	pruneEvery = time.Minute
)

// Router prefers candidates with less recent token throughput, as the package
// documentation states.
//
// Synchronisation model: the history maps each endpoint key to an atomic pointer to an
// immutable history value; a decision that sees a snapshot newer than the history's
// latest publishes a new value by compare-and-swap, and readers load it without a lock.
// Keys are added and swept through a sync.Map; one decision at a time, elected by
// compare-and-swap on nextPrune, sweeps. The Router is safe for concurrent use.
type Router struct {
	// history maps endpoint.Key to *atomic.Pointer[history].
	history sync.Map
	// nextPrune is the Unix time in nanoseconds after which the next decision sweeps.
	nextPrune atomic.Int64
}

var _ routing.Scorer = (*Router)(nil)

// New returns a Router with an empty history.
func New() *Router {
	return &Router{}
}

// minRequestRate is the tokens/s a request in flight is assumed to add at least, when no
// candidate's rate per running request is known.
const minRequestRate = 1.0

// Score records the candidates' metrics snapshots in the history, then sets the score of
// each candidate with fresh metrics to minus its projected throughput in tokens per
// second (its measured rate plus, per request the gateway has in flight on it, its rate
// per running request, or the fleet's when it runs none, at least minRequestRate), or to
// minus its Running requests plus those in flight while some candidate's throughput is
// unknown, and that of every other candidate to one less than the lowest known score. It returns
// routing.ErrUndecided, leaving scores unspecified, when no candidate has fresh metrics.
func (r *Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	r.prune(rc.Now)
	known, allRates := false, true
	// perRequest sums, over candidates running requests, their tokens/s per running
	// request, to price the requests in flight of idle candidates.
	perRequest, busy := 0.0, 0
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		known = true
		rate, ok := r.record(c.Key, c.Metrics).rate()
		scores[i] = rate
		allRates = allRates && ok
		if ok && c.Metrics.Running > 0 {
			perRequest += rate / c.Metrics.Running
			busy++
		}
	}
	if !known {
		return routing.ErrUndecided
	}
	if busy > 0 {
		perRequest /= float64(busy)
	}
	for i, c := range cands {
		if c.Metrics == nil {
			continue
		}
		// Requests the gateway sent since the last scrape are not in the engine's
		// counters yet: each request in flight counts as one more running request, so
		// that a burst spreads instead of piling onto the endpoint that looked idlest.
		inFlight := float64(c.InFlight)
		if allRates {
			own := perRequest
			if c.Metrics.Running > 0 {
				own = scores[i] / c.Metrics.Running
			}
			scores[i] = -(scores[i] + inFlight*max(own, minRequestRate))
		} else {
			scores[i] = -(c.Metrics.Running + inFlight)
		}
	}
	routing.RankUnknownLast(cands, scores)
	return nil
}

// sample is one snapshot's cumulative token count.
type sample struct {
	tokens float64
	at     time.Time
}

// history is what the Router remembers of one endpoint: its latest snapshot seen and,
// if hasPrev, the distinct one before it. A published history is never modified.
type history struct {
	prev, last sample
	hasPrev    bool
}

// rate returns the tokens per second between the two snapshots, and false if there is
// only one.
func (h *history) rate() (float64, bool) {
	if !h.hasPrev {
		return 0, false
	}
	return (h.last.tokens - h.prev.tokens) / h.last.at.Sub(h.prev.at).Seconds(), true
}

// record adds m, a snapshot of the endpoint with key k, to the history unless the
// history already holds a snapshot as recent, and returns the endpoint's history. A
// snapshot whose token count is below the previous one (the engine restarted) starts the
// history over.
func (r *Router) record(k endpoint.Key, m *endpoint.Metrics) *history {
	v, ok := r.history.Load(k)
	if !ok {
		v, _ = r.history.LoadOrStore(k, new(atomic.Pointer[history]))
	}
	ptr := v.(*atomic.Pointer[history])
	s := sample{tokens: m.PromptTokens + m.GenerationTokens, at: m.ScrapedAt}
	for {
		old := ptr.Load()
		if old != nil && !s.at.After(old.last.at) {
			return old
		}
		h := &history{last: s}
		if old != nil && s.tokens >= old.last.tokens {
			h.prev, h.hasPrev = old.last, true
		}
		if ptr.CompareAndSwap(old, h) {
			return h
		}
	}
}

// prune forgets, at most once per pruneEvery, the endpoints whose latest snapshot seen
// was scraped more than Retention before now.
func (r *Router) prune(now time.Time) {
	next := r.nextPrune.Load()
	if now.UnixNano() < next || !r.nextPrune.CompareAndSwap(next, now.Add(pruneEvery).UnixNano()) {
		return
	}
	r.history.Range(func(k, v any) bool {
		if h := v.(*atomic.Pointer[history]).Load(); h != nil && now.Sub(h.last.at) > Retention {
			r.history.CompareAndDelete(k, v)
		}
		return true
	})
}
