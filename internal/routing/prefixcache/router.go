package prefixcache

import (
	"cmp"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Defaults applied by New to zero (or negative) Config fields.
const (
	// DefaultBlockSize is the default number of tokens per hashed block.
	DefaultBlockSize = 16
	// DefaultMaxBlocksPerEndpoint is the default bound of each endpoint's index.
	DefaultMaxBlocksPerEndpoint = 65536
	// DefaultLoadImbalanceThreshold is the default number of requests in flight beyond
	// the idlest candidate's at which a candidate is left out as overloaded.
	DefaultLoadImbalanceThreshold = 8
)

// sweepInterval is the least time between two sweeps for endpoints that left.
const sweepInterval = time.Second

// stackHashes is the number of block hashes a decision keeps on the stack: enough for
// prompts of 8 KiB at the default block size. Longer prompts allocate their hashes.
const stackHashes = 128

// PodLookup finds endpoints by key; cache.Reader satisfies it.
type PodLookup interface {
	// Pod returns the pod with key k, routable or not, and whether it exists.
	Pod(k endpoint.Key) (*cache.Pod, bool)
}

// Config tunes a Router; it mirrors a RoutingPolicy's spec.prefixCache.
type Config struct {
	// BlockSize is the number of tokens hashed together as one block; a token is
	// approximated as 4 bytes of prompt. Zero means DefaultBlockSize.
	BlockSize int
	// MaxBlocksPerEndpoint bounds the block hashes remembered per endpoint, the least
	// recently routed forgotten first. Zero means DefaultMaxBlocksPerEndpoint.
	MaxBlocksPerEndpoint int
	// MinMatchRatio is the fraction of the prompt's blocks the best-matching candidate
	// must hold for the match to count; below it the least-loaded candidate wins. Zero
	// (the default) lets any match, even none, count.
	MinMatchRatio float64
	// LoadImbalanceThreshold is how many more requests in flight than the idlest
	// candidate a candidate may have and still win on its prefix match; busier ones are
	// left out of the decision. It bounds how far a hot prefix can push its favoured
	// endpoint ahead of the others. Zero means DefaultLoadImbalanceThreshold.
	LoadImbalanceThreshold int64
	// Pods, if set, is asked at most once per second, from Pick or Learn, about every
	// indexed endpoint; endpoints it reports missing or not routable are forgotten.
	// With Pods nil, only Forget forgets endpoints.
	Pods PodLookup
	// ObserveMatch, if set, is told, for every routed prompt with at least one whole
	// block, the fraction of its blocks the chosen endpoint already held. It MUST be
	// safe for concurrent use.
	ObserveMatch func(ratio float64)
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.BlockSize <= 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MaxBlocksPerEndpoint <= 0 {
		c.MaxBlocksPerEndpoint = DefaultMaxBlocksPerEndpoint
	}
	if c.LoadImbalanceThreshold <= 0 {
		c.LoadImbalanceThreshold = DefaultLoadImbalanceThreshold
	}
	return c
}

// Router is the prefix-cache routing algorithm. It learns which endpoint each prompt's
// blocks were routed to and prefers endpoints holding the longest prefix of the next
// prompt, under the load guard described in the package documentation. Create it with
// New; it is safe for concurrent use.
//
// Synchronisation model: cfg and rnd are read-only after New; the index synchronises
// itself (see Index); nextSweep is advanced by compare-and-swap, so one caller at a
// time sweeps.
type Router struct {
	cfg   Config
	rnd   routing.Random
	index *Index
	// nextSweep is the Unix time in nanoseconds before which no sweep starts.
	nextSweep atomic.Int64
}

var (
	_ routing.Scorer  = (*Router)(nil)
	_ routing.Picker  = (*Router)(nil)
	_ routing.Learner = (*Router)(nil)
)

// New returns a Router configured by cfg, zero fields defaulted, that breaks ties with
// rnd. It panics if cfg.MaxBlocksPerEndpoint is 1<<31 or more.
func New(cfg Config, rnd routing.Random) *Router {
	cfg = cfg.withDefaults()
	return &Router{cfg: cfg, rnd: rnd, index: NewIndex(cfg.MaxBlocksPerEndpoint)}
}

// Score sets scores[i] to the fraction, in [0, 1], of the prompt's blocks whose whole
// prefix cands[i] holds. It returns routing.ErrUndecided when the prompt has no whole
// block. The load guard applies as in Pick: a candidate more than LoadImbalanceThreshold
// requests busier than the idlest scores 0, so that a weighted policy does not follow a
// hot prefix onto an overloaded endpoint either.
func (r *Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	var buf [stackHashes]uint64
	hashes := r.hashes(rc, buf[:0])
	if len(hashes) == 0 {
		return routing.ErrUndecided
	}
	limit := minInFlight(cands) + r.cfg.LoadImbalanceThreshold
	for i := range cands {
		if cands[i].InFlight > limit {
			scores[i] = 0 // overloaded: the load guard, as in Pick
			continue
		}
		scores[i] = float64(r.index.Match(cands[i].Key, hashes)) / float64(len(hashes))
	}
	return nil
}

// Pick returns the least-loaded of the candidates holding the longest prefix of the
// prompt, among the candidates that are not overloaded: a candidate with more than
// LoadImbalanceThreshold requests in flight beyond the idlest candidate is left out, so
// a hot prefix cannot push its favoured endpoint further ahead, while the other
// conversations keep their endpoints. Pick returns the least-loaded candidate of all
// when the prompt has no whole block or when the longest prefix held is less than
// MinMatchRatio of the prompt.
//
// The least loaded has the fewest requests in flight; among equals, the one that has
// been sent the fewest prompt tokens so far (cache.Load.TokensIn), so that new
// conversations spread evenly even while every endpoint is idle; remaining ties are
// broken uniformly at random. Pick never returns an error.
func (r *Router) Pick(rc *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	r.sweep(rc.Now)
	var buf [stackHashes]uint64
	hashes := r.hashes(rc, buf[:0])
	if len(hashes) == 0 {
		return r.leastLoaded(cands), nil
	}
	limit := minInFlight(cands) + r.cfg.LoadImbalanceThreshold
	var best choice
	for i := range cands {
		if cands[i].InFlight > limit {
			continue // overloaded: the load guard
		}
		best.offer(i, r.index.Match(cands[i].Key, hashes), &cands[i], r.rnd)
	}
	if float64(best.matched)/float64(len(hashes)) < r.cfg.MinMatchRatio {
		return r.leastLoaded(cands), nil
	}
	return best.index, nil
}

// Learn records that the request's prompt blocks were routed to chosen, after telling
// ObserveMatch how much of the prompt chosen already held.
func (r *Router) Learn(rc *routing.RoutingContext, chosen *cache.Pod) {
	r.sweep(rc.Now)
	var buf [stackHashes]uint64
	hashes := r.hashes(rc, buf[:0])
	if r.cfg.ObserveMatch != nil && len(hashes) > 0 {
		r.cfg.ObserveMatch(float64(r.index.Match(chosen.Key, hashes)) / float64(len(hashes)))
	}
	r.index.Add(chosen.Key, hashes)
}

// Forget drops everything the router learnt about endpoint k.
func (r *Router) Forget(k endpoint.Key) {
	r.index.Forget(k)
}

// hashes appends the block hashes of rc's prompt to dst.
func (r *Router) hashes(rc *routing.RoutingContext, dst []uint64) []uint64 {
	return BlockHashes(rc.Request.Model, rc.Prompt, r.cfg.BlockSize, dst)
}

// leastLoaded returns the index of the candidate with the fewest requests in flight.
func (r *Router) leastLoaded(cands []routing.Candidate) int {
	var best choice
	for i := range cands {
		best.offer(i, 0, &cands[i], r.rnd)
	}
	return best.index
}

// sweep forgets the endpoints that cfg.Pods reports missing or not routable, if Pods is
// set and no sweep started within sweepInterval before now. Concurrent callers do not
// wait for a sweep in progress.
func (r *Router) sweep(now time.Time) {
	if r.cfg.Pods == nil || now.IsZero() {
		return
	}
	next := r.nextSweep.Load()
	if now.UnixNano() < next || !r.nextSweep.CompareAndSwap(next, now.Add(sweepInterval).UnixNano()) {
		return
	}
	r.index.forgetIf(func(k endpoint.Key) bool {
		p, ok := r.cfg.Pods.Pod(k)
		return !ok || !p.Routable()
	})
}

// minInFlight returns the idlest candidate's in-flight count.
func minInFlight(cands []routing.Candidate) int64 {
	lo := cands[0].InFlight
	for _, c := range cands[1:] {
		lo = min(lo, c.InFlight)
	}
	return lo
}

// choice finds the candidate with the most matched blocks, then the fewest requests in
// flight, then the fewest prompt tokens sent so far, breaking remaining ties uniformly
// at random by reservoir sampling. The zero value has seen no candidate.
type choice struct {
	index, ties int
	matched     int
	inFlight    int64
	tokensIn    int64
}

// offer considers candidate i, c, holding matched blocks of the prompt.
func (best *choice) offer(i, matched int, c *routing.Candidate, rnd routing.Random) {
	next := choice{index: i, ties: 1, matched: matched, inFlight: c.InFlight, tokensIn: c.Load().TokensIn()}
	switch order := best.compare(&next); {
	case best.ties == 0 || order < 0:
		*best = next
	case order == 0:
		best.ties++
		if rnd(best.ties) == 0 {
			best.index = i
		}
	}
}

// compare returns -1 if o is better than best, +1 if worse and 0 if they tie.
func (best *choice) compare(o *choice) int {
	switch {
	case o.matched != best.matched:
		return cmp.Compare(best.matched, o.matched)
	case o.inFlight != best.inFlight:
		return cmp.Compare(o.inFlight, best.inFlight)
	default:
		return cmp.Compare(o.tokensIn, best.tokensIn)
	}
}
