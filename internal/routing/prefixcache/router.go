package prefixcache

import (
	"cmp"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/ttft"
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

// stackTicks is the number of ticks Learn keeps on the stack: enough for prompts of
// 8 KiB at the default block size. Longer prompts allocate their ticks.
const stackTicks = 128

// hashPrompt computes a prompt's block hashes; a variable so that tests count calls.
var hashPrompt = BlockHashes

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
	// candidate a candidate may have once the request is on it, and still win on its
	// prefix match; busier ones are left out of the decision. It bounds how far a hot
	// prefix can push its favoured endpoint ahead of the others. Zero means
	// DefaultLoadImbalanceThreshold.
	LoadImbalanceThreshold int64
	// Pods, if set, is asked at most once per second, from Pick or Learn, about every
	// indexed endpoint; endpoints it reports missing or not routable are forgotten.
	// With Pods nil, only Forget forgets endpoints.
	Pods PodLookup
	// ObserveMatch, if set, is told, for every routed prompt with at least one whole
	// block, the fraction of its blocks the chosen endpoint already held. It MUST be
	// safe for concurrent use.
	ObserveMatch func(ratio float64)
	// ObserveTrim, if set, is told how many blocks the index forgot each time an engine
	// reported fewer cached tokens than expected. It MUST be safe for concurrent use.
	ObserveTrim func(blocks int)
	// Budget, if set, bounds the memory of the router's index together with every other
	// index sharing it (see Budget). Nil bounds only each endpoint's blocks.
	Budget *Budget
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
// blocks were routed to, corrects that by what the engines report, and sends each request
// where its first token is predicted soonest, as the package documentation describes.
// Create it with New; it is safe for concurrent use.
//
// Synchronisation model: cfg and rnd are read-only after New; the index and pooled
// synchronise themselves (see Index, ttft.Pooled); nextSweep is advanced by
// compare-and-swap, so one caller at a time sweeps.
type Router struct {
	cfg   Config
	rnd   routing.Random
	index *Index
	// pooled is the pooled speed of the candidate sets PickPod decides over.
	pooled ttft.Pooled
	// nextSweep is the Unix time in nanoseconds before which no sweep starts.
	nextSweep atomic.Int64
}

var (
	_ routing.CellScorer = (*Router)(nil)
	_ routing.PodPicker  = (*Router)(nil)
	_ routing.Learner    = (*Router)(nil)
)

// New returns a Router configured by cfg, zero fields defaulted, that breaks ties with
// rnd. It panics if cfg.MaxBlocksPerEndpoint is 1<<31 or more.
func New(cfg Config, rnd routing.Random) *Router {
	cfg = cfg.withDefaults()
	return &Router{cfg: cfg, rnd: rnd, index: NewIndex(cfg.MaxBlocksPerEndpoint, cfg.Budget)}
}

// ReadsPrompt reports that the router reads the prompt's text: it hashes it.
func (r *Router) ReadsPrompt() bool { return true }

// Score sets scores[i] to minus the time to first token, in seconds, predicted for the
// request on cands[i], so that a weighted policy weighs the prediction. A candidate left
// out by the load guard scores -Inf. Score never returns an error.
func (r *Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	var d decision
	r.prepare(&d, rc, cands)
	for i := range cands {
		scores[i] = math.Inf(-1)
		if t, ok := d.predict(i); ok {
			scores[i] = -t
		}
	}
	return nil
}

// ScoreCells is Score straight from the hot cells of pods: it asks the index only about
// the endpoints holding the prompt's first block.
func (r *Router) ScoreCells(rc *routing.RoutingContext, pods routing.Admitted, scores []float64) error {
	cells := rc.Cells
	var fleet ttft.Fleet
	idlest := int64(math.MaxInt64)
	for j, i := range pods.Index {
		idlest = min(idlest, pods.InFlight[j])
		fleet.AddCell(cells[i], pods.Oldest)
	}
	estimate, limit := fleet.Estimator(rc.Now), idlest+r.cfg.LoadImbalanceThreshold
	tokens := r.promptTokens(rc)
	var matchBuf [16]match
	find := func(k endpoint.Key) (int, uint64, bool) { // a holder's place in pods.Index
		if i, ok := cache.FindPod(rc.Candidates, k); ok {
			if j, ok := slices.BinarySearch(pods.Index, i); ok {
				return j, cells[i].Epoch(), true
			}
		}
		return 0, 0, false
	}
	matches := r.matches(rc, r.hashes(rc), find, matchBuf[:0])
	var lenBuf [16]int
	ch := r.charges(tokens, matches, lenBuf[:0])
	for j, i := range pods.Index {
		uncached := ch.cold
		if len(matches) > 0 && matches[0].candidate == j {
			uncached = ch.uncached(matches[0].blocks)
			matches = matches[1:]
		}
		scores[j] = math.Inf(-1)
		if n := pods.InFlight[j]; n < limit {
			scores[j] = -cellTTFT(&estimate, cells[i], rc.Candidates[i], n, uncached, pods.Oldest)
		}
	}
	return nil
}

// Pick returns the candidate whose first token is predicted soonest, among those the
// load guard keeps: a candidate with LoadImbalanceThreshold or more requests in flight
// beyond the idlest candidate is left out, as the request would put it more than that
// ahead. Among equal predictions the least loaded wins: the fewest requests in flight,
// then the fewest prompt tokens sent so far (cache.Load.TokensIn), so that new
// conversations spread evenly while every endpoint is idle; remaining ties are broken
// uniformly at random. Pick never returns an error.
func (r *Router) Pick(rc *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	r.sweep(rc.Now)
	var d decision
	r.prepare(&d, rc, cands)
	var best choice
	for i := range cands {
		if t, ok := d.predict(i); ok {
			best.offer(i, t, cands[i].InFlight, cands[i].Pod, r.rnd)
		}
	}
	return best.chosen(r.rnd), nil
}

// PickPod is Pick straight from the candidates' hot cells, among the pods e admits. It
// asks the index only about the endpoints holding the prompt's first block (the only
// ones that can hold any of its leading blocks) and predicts every other candidate
// without a match, so that a decision reads at most one cell per candidate and no index
// entry; when a holder's prediction beats the prefill of the whole prompt at the fleet's
// fastest rate, it reads the holders' cells alone. Without an admission bound, the
// candidates' pooled speed comes from a ttft.Pooled, which reads it again only when it
// may have changed. It declines only when e admits no pod.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	r.sweep(rc.Now)
	pods, cells, counts := rc.Candidates, rc.Cells, rc.Counts
	limit := e.Bound()
	oldest := e.Oldest(rc.Now)

	// The load guard's idlest count and the pooled speed, over the admitted pods: every
	// pod when there is no admission bound, whose pooled speed r.pooled keeps, and whose
	// idlest count is read only when needed (idlestCount).
	var fleet ttft.Fleet
	idlest := int64(-1) // not read
	if limit == math.MaxInt64 {
		fleet = r.pooled.Fleet(cells, rc.Now, e.StaleAfter)
	} else {
		idlest = math.MaxInt64
		for i, h := range cells {
			n := counts[i].Value()
			if n >= limit {
				continue
			}
			idlest = min(idlest, n)
			fleet.AddCell(h, oldest)
		}
		if idlest == math.MaxInt64 {
			return 0, 0, false
		}
	}
	estimate, threshold := fleet.Estimator(rc.Now), r.cfg.LoadImbalanceThreshold
	tokens := r.promptTokens(rc)
	var matchBuf [16]match                             // the matches of most prompts
	find := func(k endpoint.Key) (int, uint64, bool) { // an admitted holder's place in cells
		if i, ok := cache.FindPod(pods, k); ok && counts[i].Value() < limit {
			return i, cells[i].Epoch(), true
		}
		return 0, 0, false
	}
	matches := r.matches(rc, r.hashes(rc), find, matchBuf[:0])

	// The pods holding leading blocks are the likeliest to win: they are predicted first,
	// and the soonest of their predictions bounds the winner's. When it is below the
	// prefill floor of the pods without a match (ttft.Estimator.PrefillFloor), none of them
	// can win and the decision reads no other cell; otherwise most of them lose at one
	// comparison, without being offered. Every pod is offered in candidate order, for the
	// choice to be Pick's.
	//
	// Pods at the admission bound or the load guard (idlest + threshold) are left out. The
	// guard can leave out only a pod with threshold requests in flight or more: while no
	// holder has as many, and the holders decide alone, no other count is read.
	var lenBuf [16]int
	ch := r.charges(tokens, matches, lenBuf[:0])
	guarded := func() int64 { // the cutoff of both, the idlest count read on first need
		if idlest < 0 {
			idlest = idlestCount(counts)
		}
		return min(limit, idlest+threshold)
	}
	cutoff := limit
	if idlest >= 0 {
		cutoff = guarded()
	}
	for j := range matches {
		m := &matches[j]
		if m.inFlight = counts[m.candidate].Value(); m.inFlight >= threshold && idlest < 0 {
			cutoff = guarded()
		}
	}
	bound := math.Inf(1)
	for j := range matches {
		if m := &matches[j]; m.inFlight < cutoff {
			m.ttft = cellTTFT(&estimate, cells[m.candidate], pods[m.candidate], m.inFlight, ch.uncached(m.blocks), oldest)
			bound = min(bound, m.ttft)
		}
	}
	var best choice
	if bound < estimate.PrefillFloor(ch.cold) { // no pod without a match can win: skip them
		for _, m := range matches {
			if m.inFlight < cutoff {
				best.offer(m.candidate, m.ttft, m.inFlight, pods[m.candidate], r.rnd)
			}
		}
		return best.chosen(r.rnd), best.inFlight, true
	}
	cutoff = guarded()
	for i, h := range cells {
		if len(matches) > 0 && matches[0].candidate == i {
			if m := matches[0]; m.inFlight < cutoff {
				best.offer(i, m.ttft, m.inFlight, pods[i], r.rnd)
			}
			matches = matches[1:]
			continue
		}
		if n := counts[i].Value(); n < cutoff {
			if t := cellTTFT(&estimate, h, pods[i], n, ch.cold, oldest); best.ties.Len() == 0 || t <= min(bound, best.ttft) {
				best.offer(i, t, n, pods[i], r.rnd)
			}
		}
	}
	if best.ties.Len() == 0 { // every admitted pod's count grew past the guard meanwhile
		return 0, 0, false
	}
	return best.chosen(r.rnd), best.inFlight, true
}

// idlestCount returns the least of counts.
func idlestCount(counts []*cache.Count) int64 {
	idlest := int64(math.MaxInt64)
	for _, c := range counts {
		idlest = min(idlest, c.Value())
	}
	return idlest
}

// cellTTFT predicts the time to first token on pod p, of hot cell h, with n requests of
// this process in flight, for uncached prompt tokens it is not expected to hold; the
// pod's metrics are fresh if scraped at oldest or later.
func cellTTFT(estimate *ttft.Estimator, h *cache.Hot, p *cache.Pod, n int64, uncached float64, oldest int64) float64 {
	if h.ScrapedAt() < oldest {
		return estimate.Unknown(uncached)
	}
	b := h.Backlog()
	if t, idle := estimate.Idle(&b, n, uncached); idle { // inlined: most pods of a decision
		return t
	}
	return estimate.FromCell(h, p, n, uncached, 0)
}

// match is a candidate that holds leading blocks of the prompt and, once PickPod
// predicted it, its requests in flight and predicted time to first token.
type match struct {
	candidate, blocks int
	inFlight          int64
	ttft              float64
}

// matches appends to dst the candidates that hold at least MinMatchRatio of the prompt's
// blocks hashes in leading blocks (and at least one), in candidate order. It asks the
// index only about the endpoints holding the prompt's first block: as block hashes are
// chained, the only ones that can hold any of its leading blocks. find returns such an
// endpoint's candidate index, as its match records it, and its engine's restart epoch,
// or false when the endpoint is not a candidate the decision admits.
func (r *Router) matches(rc *routing.RoutingContext, hashes []uint64, find func(endpoint.Key) (int, uint64, bool), dst []match) []match {
	if len(hashes) == 0 {
		return dst
	}
	var keys [16]endpoint.Key
	holders := r.index.Holders(hashes[0], keys[:0])
	minHeld := max(r.minHeld(rc), 1)
	for _, k := range holders {
		i, epoch, ok := find(k)
		if !ok {
			continue
		}
		if held := r.index.Match(k, hashes, epoch); held >= minHeld {
			dst = append(dst, match{candidate: i, blocks: held})
		}
	}
	slices.SortFunc(dst, func(a, b match) int { return cmp.Compare(a.candidate, b.candidate) })
	return dst
}

// decision is one request's view of its candidates: the candidates holding leading
// blocks of the prompt and the prediction of each candidate's time to first token.
type decision struct {
	r        *Router
	cands    []routing.Candidate
	estimate ttft.Estimator
	limit    int64 // the load guard: candidates with this many requests in flight or more are left out
	// matches are the candidates holding leading blocks (Router.matches), ch what the
	// prompt's prefill costs each; they are slices of matchBuf and lenBuf for most prompts.
	matches  []match
	ch       charges
	matchBuf [16]match
	lenBuf   [16]int
}

// prepare makes d the view of rc over cands.
func (r *Router) prepare(d *decision, rc *routing.RoutingContext, cands []routing.Candidate) {
	d.r, d.cands, d.estimate = r, cands, ttft.New(cands, rc.Now)
	d.limit = minInFlight(cands) + r.cfg.LoadImbalanceThreshold
	find := func(k endpoint.Key) (int, uint64, bool) {
		i := slices.IndexFunc(cands, func(c routing.Candidate) bool { return c.Key == k })
		if i < 0 {
			return 0, 0, false
		}
		return i, epochOf(&cands[i]), true
	}
	d.matches = r.matches(rc, r.hashes(rc), find, d.matchBuf[:0])
	d.ch = r.charges(r.promptTokens(rc), d.matches, d.lenBuf[:0])
}

// minHeld returns the fewest leading blocks of rc's prompt that count as a match
// (MinMatchRatio).
func (r *Router) minHeld(rc *routing.RoutingContext) int {
	return int(math.Ceil(r.cfg.MinMatchRatio * float64(r.blocks(rc))))
}

// blocks returns the number of whole blocks of rc's prompt, hashed or not.
func (r *Router) blocks(rc *routing.RoutingContext) int {
	return len(rc.Prompt) / (r.cfg.BlockSize * bytesPerToken)
}

// promptTokens returns rc's prompt tokens, estimated from its text when rc does not say.
func (r *Router) promptTokens(rc *routing.RoutingContext) int64 {
	if rc.PromptTokens > 0 {
		return rc.PromptTokens
	}
	return int64(len(rc.Prompt) / bytesPerToken)
}

// predict returns the predicted time to first token on candidate i, in seconds, and
// false when the load guard leaves it out.
func (d *decision) predict(i int) (float64, bool) {
	c := &d.cands[i]
	if c.InFlight >= d.limit {
		return 0, false
	}
	uncached := d.ch.cold
	for _, m := range d.matches {
		if m.candidate == i {
			uncached = d.ch.uncached(m.blocks)
			break
		}
	}
	return d.estimate.TTFT(c, uncached), true
}

// charges is what a prompt's prefill costs each candidate of one decision, in the prompt
// tokens it is charged the prefill of: those beyond the leading blocks the candidate
// holds, less the replication credit of the blocks others hold (see sharedBlocks).
type charges struct {
	tokens, blockSize float64
	shared            []int   // sharedBlocks of the decision's matches
	cold              float64 // the charge of a candidate holding no leading block
}

// charges returns the charges of a prompt of tokens tokens among matches, building the
// shared blocks in buf.
func (r *Router) charges(tokens int64, matches []match, buf []int) charges {
	ch := charges{tokens: float64(tokens), blockSize: float64(r.cfg.BlockSize), shared: sharedBlocks(matches, buf)}
	ch.cold = ch.uncached(0)
	return ch
}

// uncached returns the charge of a candidate holding held leading blocks.
func (ch *charges) uncached(held int) float64 {
	return ch.tokens - (float64(held)+replicated(ch.shared, held))*ch.blockSize
}

// sharedBlocks appends to dst the leading blocks each of matches holds, most first (the
// k-th of them, from 1, is how far k candidates hold the prompt), or none when the
// longest of them is one candidate's alone.
//
// A prefix that c candidates hold is popular: the requests sharing it have spread it over
// c engines already, and its prefill on one more engine is an investment that the
// requests after this one share, as that engine can then take them by load. A candidate
// without a block that c others hold is therefore charged only 1/c of its prefill
// (replicated): a prefix that one engine holds stays there until that engine's wait
// outweighs a whole prefill elsewhere, but one that several hold spreads over the rest by
// load. Without the credit, an engine the hot prefix never reached is left to the
// requests that share nothing, while the prefix's own requests queue on its holders to
// save a prefill that one request could pay for all. The credit is given only where the
// prompt's longest match is held by two or more: a conversation's history, which one
// engine holds, keeps its request there by the whole prefill of the history and of the
// system prompt before it, whoever else holds that system prompt.
func sharedBlocks(matches []match, dst []int) []int {
	for _, m := range matches {
		dst = append(dst, m.blocks)
	}
	slices.SortFunc(dst, func(a, b int) int { return cmp.Compare(b, a) })
	if len(dst) < 2 || dst[1] < dst[0] { // the longest match is one candidate's alone
		return dst[:0]
	}
	return dst
}

// replicated returns the blocks, beyond its held leading ones, a candidate is credited as
// holding because others hold them (sharedBlocks): each block that c other candidates
// hold counts as 1-1/c of a block.
func replicated(shared []int, held int) float64 {
	credit := 0.0
	for k := 2; k <= len(shared); k++ { // blocks [shared[k], shared[k-1]) are held by k candidates
		hi, lo := shared[k-1], held
		if k < len(shared) {
			lo = max(lo, shared[k])
		}
		if hi > lo {
			credit += float64(hi-lo) * (1 - 1/float64(k))
		}
	}
	return credit
}

// Learn records that the request's prompt blocks were routed to chosen, after telling
// ObserveMatch how much of the prompt chosen already held. Its Receipt, when chosen was
// expected to hold part of the prompt, compares that with the cached tokens the engine
// reports and trims the index where the engine held less.
func (r *Router) Learn(rc *routing.RoutingContext, chosen *cache.Pod) routing.Receipt {
	r.sweep(rc.Now)
	hashes := r.hashes(rc)
	if len(hashes) == 0 {
		return nil
	}
	blocks := r.blocks(rc)
	e := r.engine(chosen)
	var rec *receipt
	var tickBuf [stackTicks]uint64
	if held := r.index.Ticks(chosen.Key, hashes, e.Epoch, tickBuf[:0]); len(held) > 0 {
		rec = r.keptReceipt(rc)
		*rec = receipt{index: r.index, key: chosen.Key, epoch: e.Epoch, blocks: blocks, ticks: append(rec.ticks[:0], held...),
			observe: r.cfg.ObserveTrim}
	}
	if r.cfg.ObserveMatch != nil {
		held := 0
		if rec != nil {
			held = len(rec.ticks)
		}
		r.cfg.ObserveMatch(float64(held) / float64(blocks))
	}
	floor := r.index.Add(chosen.Key, hashes, e)
	if rec == nil {
		return nil // nothing expected, nothing to correct
	}
	rec.floor = floor
	return rec
}

// engine returns what the index is told about p's engine: its restart epoch and, when
// the engine reports its KV-cache size, that size in the router's blocks.
func (r *Router) engine(p *cache.Pod) Engine {
	m := p.Metrics()
	if m == nil {
		return Engine{}
	}
	e := Engine{Epoch: m.Profile.Epoch}
	if m.NumGPUBlocks > 0 && m.BlockSize > 0 {
		e.MaxBlocks = max(m.NumGPUBlocks*m.BlockSize/r.cfg.BlockSize, 1)
	}
	return e
}

// epochOf returns the restart epoch of c's engine: of its fresh metrics, or, when they
// are stale, of the last scraped.
func epochOf(c *routing.Candidate) uint64 {
	m := c.Metrics
	if m == nil {
		m = c.Pod.Metrics()
	}
	if m != nil {
		return m.Profile.Epoch
	}
	return 0
}

// receipt is what Learn expected an engine to hold of one prompt: the ticks, before the
// request touched them, of the leading blocks the index held for it.
type receipt struct {
	index  *Index
	key    endpoint.Key
	epoch  uint64
	blocks int      // the prompt's whole blocks
	ticks  []uint64 // of the blocks expected held, in prompt order
	// floor is the lowest tick of the request's own blocks once Learn added them
	// (Index.Add): a trim stays below it, as the engine has just prefilled them.
	floor uint64
	// observe is Config.ObserveTrim.
	observe func(blocks int)
}

// keptReceipt returns the receipt r keeps in rc's memory, made and kept there on first
// use: Learn writes over it, its ticks' capacity reused, for each request routed in that
// memory. A Served that learns again writes over the receipt it replaces. When rc keeps
// another router's receipt, which a decision that several routers learn from still
// holds, it returns a new one.
func (r *Router) keptReceipt(rc *routing.RoutingContext) *receipt {
	kept := rc.Kept()
	if rec, ok := kept.(*receipt); ok && rec.index == r.index {
		return rec
	}
	rec := new(receipt)
	if kept == nil {
		rc.SetKept(rec)
	}
	return rec
}

// Settle trims the index when the engine reports fewer cached tokens than expected: the
// first expected block it lacked was evicted, and with it, as the engine evicts least
// recently used blocks first, every block last routed no later than that one. One block
// of difference is forgiven, for the approximate token count of the prompt's text.
func (rec *receipt) Settle(u routing.Usage) {
	if u.PromptTokens <= 0 || u.CachedTokens < 0 {
		return
	}
	held := int(float64(rec.blocks) * float64(min(u.CachedTokens, u.PromptTokens)) / float64(u.PromptTokens))
	if held+1 >= len(rec.ticks) {
		return
	}
	if n := rec.index.Trim(rec.key, rec.epoch, min(rec.ticks[held], rec.floor-1)); n > 0 && rec.observe != nil {
		rec.observe(n)
	}
}

// Forget drops everything the router learnt about endpoint k.
func (r *Router) Forget(k endpoint.Key) {
	r.index.Forget(k)
}

// hashes returns the block hashes of rc's prompt, hashed once per request: cached on
// rc under the router's block size and bound. Only the leading MaxBlocksPerEndpoint
// blocks are hashed, as no endpoint holds more of one prompt.
func (r *Router) hashes(rc *routing.RoutingContext) []uint64 {
	key := uint64(r.cfg.BlockSize)<<32 | uint64(r.cfg.MaxBlocksPerEndpoint)
	hashes, ok := rc.PromptHashes(key)
	if ok {
		return hashes
	}
	prompt, blockBytes := rc.Prompt, r.cfg.BlockSize*bytesPerToken
	prompt = prompt[:min(len(prompt), r.cfg.MaxBlocksPerEndpoint*blockBytes)]
	hashes = slices.Grow(hashes, len(prompt)/blockBytes) // one allocation for any prompt
	hashes = hashPrompt(rc.Request.Model, prompt, r.cfg.BlockSize, hashes)
	rc.SetPromptHashes(key, hashes)
	return hashes
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

// choice finds the candidate with the soonest predicted first token, then the fewest
// requests in flight, then the fewest prompt tokens sent so far, breaking remaining ties
// uniformly at random (routing.Ties). It reads the prompt tokens sent only of candidates
// tied on the first two. The zero value has seen no candidate.
type choice struct {
	ttft     float64
	inFlight int64
	// pod is the best; tokensIn is its prompt tokens sent once read (tokensRead).
	pod        *cache.Pod
	tokensIn   int64
	tokensRead bool
	ties       routing.Ties
}

// offer considers candidate i, pod, whose predicted time to first token and requests in
// flight are next.
func (best *choice) offer(i int, ttft float64, inFlight int64, pod *cache.Pod, rnd routing.Random) {
	order, tokensIn, tokensRead := -1, int64(0), false
	switch {
	case best.ties.Len() == 0:
	case ttft != best.ttft:
		order = cmp.Compare(ttft, best.ttft)
	case inFlight != best.inFlight:
		order = cmp.Compare(inFlight, best.inFlight)
	default:
		if !best.tokensRead {
			best.tokensIn, best.tokensRead = best.pod.Load().TokensIn(), true
		}
		tokensIn, tokensRead = pod.Load().TokensIn(), true
		order = cmp.Compare(tokensIn, best.tokensIn)
	}
	switch order {
	case -1:
		best.ttft, best.inFlight, best.pod = ttft, inFlight, pod
		best.tokensIn, best.tokensRead = tokensIn, tokensRead
		best.ties.Reset(i)
	case 0:
		best.ties.Add(i, rnd)
	}
}

// chosen returns the index of the candidate chosen among those offered, at least one.
func (best *choice) chosen(rnd routing.Random) int { return best.ties.Draw(rnd) }
