package routing

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// ErrQueueTimeout: a queued request found no endpoint below its concurrency limit within
// the queue's wait limit (the gateway answers 503 with Retry-After).
var ErrQueueTimeout = errors.New("no endpoint freed up within the queue's wait limit")

// QueueOptions configure an asynchronous router.
type QueueOptions struct {
	// MaxQueued bounds the requests waiting per model; beyond it requests are rejected
	// with ErrQueueFull. Required, > 0.
	MaxQueued int
	// MaxWait bounds how long a request waits; it is then rejected with
	// ErrQueueTimeout. 0 means until the request's context ends.
	MaxWait time.Duration
}

// Queuer tracks the requests waiting in a queue; the gateway's cache view provides one.
type Queuer interface {
	// Queue counts one request waiting for the target counted by l until the returned
	// ticket is done.
	Queue(l *cache.Load) *cache.Ticket
}

// Admission is the wait for capacity that every router of a process shares: the
// concurrency cap (Options.MaxInFlight) is per endpoint, whichever route or policy sent
// the request, so the requests that wait for it wait in one place. A request waits in
// the FIFO of every one of its candidates; when any router's Target on an endpoint is
// released, the oldest waiter that may go there is routed again, by its own router's
// algorithm, and the next, until one finds every candidate at the cap. A waiter keeps
// its router's algorithm, so it outlives a router replaced by a policy change.
//
// Synchronisation model: mu guards the FIFOs and the per-model counts and is taken only
// when a request must wait or a release finds requests waiting; waiting counts the
// waiters of every model so that the common path (nobody waiting) takes no lock. The
// selections of waiters are made under mu, one at a time, so that a release wakes
// waiters strictly in arrival order.
type Admission struct {
	queuer  Queuer
	waiting atomic.Int64

	mu sync.Mutex
	// fifos maps an endpoint's load counter to the waiters that may go there, oldest
	// first.
	fifos map[*cache.Load]*list.List
	// queued counts the waiters per model name, for QueueOptions.MaxQueued.
	queued map[string]int
}

// NewAdmission returns an empty Admission whose waiters are counted by q.
func NewAdmission(q Queuer) *Admission {
	return &Admission{queuer: q, fifos: make(map[*cache.Load]*list.List), queued: make(map[string]int)}
}

// waiter is one queued request.
type waiter struct {
	rc *RoutingContext
	// sel is the selection of the router the request came through.
	sel    selector
	ticket *cache.Ticket
	// elems are the waiter's elements in the FIFOs of rc.Candidates, index for index;
	// nil once the waiter left.
	elems []*list.Element
	// stopCancel unregisters the context's callback; stopTimer stops the wait limit's
	// timer, if any.
	stopCancel func() bool
	stopTimer  func() bool
}

// enqueue makes rc wait, as selected by sel, unless its model already has maxQueued
// waiters. A waiter still waiting after maxWait (> 0) is rejected with ErrQueueTimeout.
func (a *Admission) enqueue(rc *RoutingContext, sel selector, maxQueued int, maxWait time.Duration) {
	a.mu.Lock()
	if a.queued[rc.Model.Name] >= maxQueued {
		a.mu.Unlock()
		rc.Reject(ErrQueueFull)
		return
	}
	w := &waiter{rc: rc, sel: sel, ticket: a.queuer.Queue(rc.Model.Load().Queued())}
	w.elems = make([]*list.Element, len(rc.Candidates))
	for i, p := range rc.Candidates {
		fifo := a.fifos[p.Load()]
		if fifo == nil {
			fifo = list.New()
			a.fifos[p.Load()] = fifo
		}
		w.elems[i] = fifo.PushBack(w)
	}
	a.queued[rc.Model.Name]++
	a.waiting.Add(1)
	w.stopCancel = context.AfterFunc(rc, func() { a.leave(w, context.Cause(rc)) })
	if maxWait > 0 {
		w.stopTimer = time.AfterFunc(maxWait, func() { a.leave(w, ErrQueueTimeout) }).Stop
	}
	a.mu.Unlock()
	// Capacity may have been released between the failed attempt and the enqueue, and a
	// request that queued because others wait may find its own candidates free.
	for _, p := range rc.Candidates {
		if sel.opts.MaxInFlight <= 0 || p.Load().InFlight() < sel.opts.MaxInFlight {
			a.released(p.Load())
		}
	}
}

// leave takes w out of the queue, if still there, and rejects it with err.
func (a *Admission) leave(w *waiter, err error) {
	a.mu.Lock()
	removed := a.remove(w)
	a.mu.Unlock()
	if removed {
		w.stop()
		w.rc.Reject(err)
	}
}

// remove takes w out of every FIFO and reports whether it was there. The caller holds mu.
func (a *Admission) remove(w *waiter) bool {
	if w.elems == nil {
		return false
	}
	for i, p := range w.rc.Candidates {
		fifo := a.fifos[p.Load()]
		fifo.Remove(w.elems[i])
		if fifo.Len() == 0 {
			delete(a.fifos, p.Load())
		}
	}
	w.elems = nil
	model := w.rc.Model.Name
	if a.queued[model]--; a.queued[model] == 0 {
		delete(a.queued, model)
	}
	w.ticket.Done()
	a.waiting.Add(-1)
	return true
}

// stop unregisters what would make w leave.
func (w *waiter) stop() {
	w.stopCancel()
	if w.stopTimer != nil {
		w.stopTimer()
	}
}

// Released tells a that a reservation on p ended, for the waiters that may go there to
// be routed again. Targets of routers built with a call it themselves; a caller that
// reserves p by other means (cache.Tracker.Reserve) calls it once that reservation ends.
func (a *Admission) Released(p *cache.Pod) { a.released(p.Load()) }

// released routes the waiters that may go to the endpoint counted by l, oldest first,
// until one finds every candidate busy: l is then at its cap again.
func (a *Admission) released(l *cache.Load) {
	// A request enqueued after this check tries its free candidates itself.
	if a.waiting.Load() == 0 {
		return
	}
	for {
		a.mu.Lock()
		fifo := a.fifos[l]
		if fifo == nil {
			a.mu.Unlock()
			return
		}
		w := fifo.Front().Value.(*waiter)
		t, err := w.sel.selectAndReserve(w.rc)
		if errors.Is(err, errAllBusy) {
			a.mu.Unlock()
			return
		}
		a.remove(w)
		a.mu.Unlock()
		w.stop()
		settle(w.rc, t, err)
	}
}

// NewQueue returns an asynchronous Router. A request that finds a candidate below
// opts.MaxInFlight while nobody waits is selected and reserved at once, as by NewRouter.
// Otherwise it waits in opts.Admission, bounded per model by qopts.MaxQueued and in time
// by qopts.MaxWait, and is settled later, from the goroutine that releases capacity on
// one of its candidates. A request whose context ends leaves the queue at once and is
// rejected with the context's error. opts.MaxInFlight must be > 0 and opts.Admission
// set.
func NewQueue(p Picker, opts Options, qopts QueueOptions) Router {
	return &queueRouter{sel: newSelector(p, opts), opts: qopts}
}

type queueRouter struct {
	sel  selector
	opts QueueOptions
}

// ReadsPrompt reports whether the router's algorithm or its fallback reads the prompt's
// text.
func (q *queueRouter) ReadsPrompt() bool { return q.sel.readsPrompt() }

func (q *queueRouter) Route(rc *RoutingContext) {
	a := q.sel.opts.Admission
	// A request without candidates has nothing to wait for.
	if a.waiting.Load() == 0 || len(rc.Candidates) == 0 {
		t, err := q.sel.selectAndReserve(rc)
		if !errors.Is(err, errAllBusy) {
			settle(rc, t, err)
			return
		}
	}
	a.enqueue(rc, q.sel, q.opts.MaxQueued, q.opts.MaxWait)
}

// settle settles rc with the outcome of a selection, releasing the target if rc was
// already settled (its context ended first).
func settle(rc *RoutingContext, t *Target, err error) {
	if err != nil {
		rc.Reject(err)
		return
	}
	if !rc.Resolve(t) {
		t.Release(0)
	}
}
