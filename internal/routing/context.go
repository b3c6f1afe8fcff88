package routing

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// Request is what a router may know about one inference request.
type Request struct {
	// Model is the requested model or adapter name.
	Model string
	// Prompt is the flattened prompt text (chat messages joined in order). The gateway
	// leaves it empty for routers that do not read it (ReadsPrompt).
	Prompt string
	// PromptTokens is the estimated number of prompt tokens.
	PromptTokens int64
	// MaxTokens is the requested completion length; 0 when the request does not say.
	MaxTokens int64
	// Stream reports whether the client asked for a streamed response.
	Stream bool
	// RequestID identifies the request in logs and in the x-request-id header.
	RequestID string
	// Headers are the request's headers. They MUST NOT be modified.
	Headers http.Header
}

// Errors a RoutingContext is rejected with.
var (
	// ErrNoEndpoints: the request has no candidate endpoint (the gateway answers 503).
	ErrNoEndpoints = errors.New("no ready endpoint serves the model")
	// ErrQueueFull: every candidate is at its concurrency limit and the model's queue is
	// full (the gateway answers 429).
	ErrQueueFull = errors.New("request queue is full")
	// ErrPending is returned by TryResult while the context is unsettled.
	ErrPending = errors.New("routing decision pending")
)

// RoutingContext is one request's routing state: the request facts, its candidates and a
// promise of its target. It embeds the request's context.Context.
//
// Synchronisation model: the promise is settled exactly once, by Resolve or Reject,
// whichever comes first, under mu; target and err are written before state is set, and
// readers read them only after observing state set, so they need no lock. The channel
// Settled returns is made on first demand, under mu, and closed by the settling call, so
// that a decision settled synchronously makes none. Wait and Settled may be used by any
// number of goroutines. Request, Model, Candidates, Cells and Now are set at
// construction and never written again. The cached prompt hashes and what a Learner
// keeps (Kept) belong to the routing decision, which uses the context from one goroutine
// at a time (the queue hands a waiting context over under its lock).
type RoutingContext struct {
	context.Context
	Request

	// Model is the requested model, whose counters count the request.
	Model *cache.Model
	// Candidates are the routable endpoints the request may go to. The slice is owned by
	// the context and MUST NOT be modified.
	Candidates []*cache.Pod
	// Cells are the candidates' hot cells, index for index, for algorithms that read
	// only counters and metric summaries. The slice MUST NOT be modified.
	Cells []*cache.Hot
	// Counts are the candidates' in-flight counts, index for index, laid out densely for
	// algorithms that read nothing else of most candidates. The slice MUST NOT be
	// modified.
	Counts []*cache.Count
	// Now is when routing started; metrics staleness is judged at this instant.
	Now time.Time

	// state is 1 once settled.
	state   atomic.Uint32
	mu      sync.Mutex
	settled chan struct{} // made by Settled, closed by settle; guarded by mu
	target  *Target
	err     error
	// slot is the Target the router resolves with, so that a decision allocates none.
	slot Target
	// hashes are the prompt's hashes cached under hashKey, when hashed is set.
	hashes  []uint64
	hashKey uint64
	hashed  bool
	// kept is what a Learner keeps in the context's memory (Kept), across Init.
	kept any
}

// NewRoutingContext returns an unsettled context for req on model, with candidates.
func NewRoutingContext(ctx context.Context, req Request, model *cache.Model, candidates cache.PodSet) *RoutingContext {
	rc := new(RoutingContext)
	rc.Init(ctx, req, model, candidates)
	return rc
}

// Init makes rc an unsettled context for req on model, with candidates, as
// NewRoutingContext does, in memory the caller keeps: rc is new, or settled and no
// longer used by anyone, its target released. It lets a caller that routes many requests
// one after another route them without allocating.
func (rc *RoutingContext) Init(ctx context.Context, req Request, model *cache.Model, candidates cache.PodSet) {
	rc.Context, rc.Request, rc.Model = ctx, req, model
	rc.Candidates, rc.Cells, rc.Counts = candidates.Pods, candidates.Hot, candidates.Counts
	rc.Now = time.Now()
	rc.state.Store(0)
	rc.settled, rc.target, rc.err = nil, nil, nil
	rc.slot = Target{}
	rc.hashes, rc.hashed = rc.hashes[:0], false
}

// PromptHashes returns the hashes of the request's prompt that SetPromptHashes cached
// under key, and true. Otherwise it returns false and an empty slice, with the capacity
// of any hashes cached before, to append the hashes to. With it, every attempt of a
// decision, and the learning that follows, hash the prompt once. The key names how the
// hashes were computed, such as a block size; the caller MUST NOT modify cached hashes.
func (rc *RoutingContext) PromptHashes(key uint64) ([]uint64, bool) {
	if rc.hashed && rc.hashKey == key {
		return rc.hashes, true
	}
	return rc.hashes[:0], false
}

// SetPromptHashes caches hashes, of the request's prompt, under key, replacing what was
// cached: the slice PromptHashes returned for another key is then no longer valid. The
// context keeps hashes until it is initialised again.
func (rc *RoutingContext) SetPromptHashes(key uint64, hashes []uint64) {
	rc.hashes, rc.hashKey, rc.hashed = hashes, key, true
}

// Kept returns what SetKept stored in the context, nil if nothing: memory a Learner
// reuses for the Receipt of each request routed in this context's memory, so that a
// caller that routes one request after another in one context (Init) allocates no
// receipt per request. Init keeps it: a context is initialised again only once nobody
// uses its target, and with it the receipt, any more.
func (rc *RoutingContext) Kept() any { return rc.kept }

// SetKept stores v in the context for Kept to return, replacing what was stored.
func (rc *RoutingContext) SetKept(v any) { rc.kept = v }

// Resolve settles the context with t. It reports false if the context was already
// settled, in which case the caller still owns t and MUST release it.
func (rc *RoutingContext) Resolve(t *Target) bool {
	return rc.settle(t, nil)
}

// Reject settles the context with err. It reports false if the context was already
// settled.
func (rc *RoutingContext) Reject(err error) bool {
	return rc.settle(nil, err)
}

// settle stores the outcome once and reports whether this call stored it.
func (rc *RoutingContext) settle(t *Target, err error) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.state.Load() != 0 {
		return false
	}
	rc.target, rc.err = t, err
	rc.state.Store(1)
	if rc.settled != nil {
		close(rc.settled)
	}
	return true
}

// closed is the channel Settled returns for contexts settled before it was asked for.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Settled returns a channel closed when the context is resolved or rejected.
func (rc *RoutingContext) Settled() <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.settled == nil {
		if rc.state.Load() != 0 {
			return closed
		}
		rc.settled = make(chan struct{})
	}
	return rc.settled
}

// TryResult returns the outcome without blocking: the target, the rejection error, or
// ErrPending while unsettled.
func (rc *RoutingContext) TryResult() (*Target, error) {
	if rc.state.Load() == 0 {
		return nil, ErrPending
	}
	return rc.target, rc.err
}

// Wait blocks until the context is settled or its context.Context ends, which rejects it
// with the context's error, and returns the outcome. If a resolution wins the race with
// the end of the context, Wait returns the target and the caller owns it.
func (rc *RoutingContext) Wait() (*Target, error) {
	if rc.state.Load() == 0 {
		select {
		case <-rc.Settled():
		case <-rc.Done():
			rc.Reject(context.Cause(rc))
		}
	}
	return rc.target, rc.err
}

// Target is a resolved routing decision: an endpoint with a reservation counted on it and
// on the model. The holder MUST call Release when the response ends, fails or the client
// goes away.
type Target struct {
	// Pod is the chosen endpoint.
	Pod *cache.Pod

	reservation cache.Reservation
	// receipt, if set, is the routing algorithm's, settled by Report.
	receipt Receipt
	// learner, if set, learnt the choice from rc, the context the target resolves; Served
	// has it learn again.
	learner Learner
	rc      *RoutingContext
	// admission, if set, is told when the reservation is released.
	admission *Admission
	released  atomic.Bool
	reported  sync.Once
}

// WantsReport reports whether Report would tell the routing algorithm anything, so that
// a caller reads the engine's usage only when it counts.
func (t *Target) WantsReport() bool { return t.receipt != nil }

// Report passes what the engine reported about the request's prompt on to the routing
// algorithm that chose the target, so that it can correct what it learnt. Only the first
// call has an effect; it is safe from any goroutine, before or after Release.
func (t *Target) Report(u Usage) {
	if t.receipt == nil {
		return
	}
	t.reported.Do(func() { t.receipt.Settle(u) })
}

// Served tells the routing algorithm that chose the target that p served the request
// instead of Pod, as a fallback the data plane tried: what it learns from a routed
// request, such as a prefix-index entry or a session's endpoint, it learns for p, and a
// later Report corrects what it learnt there. What it learnt for Pod stays until the
// algorithm corrects or forgets it. It moves no reservation. It MUST NOT be called
// concurrently with Report, nor after the context's memory is initialised again.
func (t *Target) Served(p *cache.Pod) {
	if t.learner == nil || p == t.Pod {
		return
	}
	t.receipt = t.learner.Learn(t.rc, p)
}

// Release ends the reservation, adding tokensOut generated tokens to the counters. Only
// the first call has an effect; it is safe from any goroutine.
func (t *Target) Release(tokensOut int64) {
	if !t.released.CompareAndSwap(false, true) {
		return
	}
	t.reservation.Release(tokensOut)
	if t.admission != nil {
		t.admission.Released(t.Pod)
	}
}

// Decoding records that the first token of the answer arrived, so that predictions of
// the engine's wait know when the request, of maxTokens output tokens at most (0: not
// set), should free its slot (cache.Reservation.Decoding). Only the first call before
// Release counts.
func (t *Target) Decoding(maxTokens int64) { t.reservation.Decoding(maxTokens) }

// InFlight returns the in-flight count of candidate i (Counts[i]). Calling it, routing
// carries the count's inlinable body to the algorithms, which then inline Count.Value
// without importing internal/cache themselves.
func (rc *RoutingContext) InFlight(i int) int64 { return rc.Counts[i].Value() }
