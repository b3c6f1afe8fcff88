package routing

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// QueueOptions configure an asynchronous router.
type QueueOptions struct {
	// MaxQueued bounds the requests waiting per model; beyond it requests are rejected
	// with ErrQueueFull. Required, > 0.
	MaxQueued int
}

// Queuer tracks the requests waiting in a queue; the gateway's cache view provides one.
type Queuer interface {
	// Queue counts one request waiting for the target counted by l until the returned
	// ticket is done.
	Queue(l *cache.Load) *cache.Ticket
}

// NewQueue returns an asynchronous Router. A request that finds a candidate below
// opts.MaxInFlight is selected and reserved at once, as by NewRouter. Otherwise it waits
// in its model's FIFO queue, bounded by qopts.MaxQueued, and is settled later, from the
// goroutine that releases capacity: when a Target it handed out is released, the head
// of that model's queue is routed again. A request whose context ends leaves the queue
// at once and is rejected with the context's error. opts.MaxInFlight must be > 0.
//
// Synchronisation model: mu guards the per-model queues and is taken only when a request
// must wait or capacity is released while requests wait; queued counts the waiting
// requests of all models so that the common path (nobody waiting) takes no lock.
// Requests are served in arrival order per model while anyone waits.
func NewQueue(p Picker, opts Options, q Queuer, qopts QueueOptions) Router {
	return &queueRouter{sel: newSelector(p, opts), queuer: q, maxQueued: qopts.MaxQueued, waiting: make(map[string]*list.List)}
}

type queueRouter struct {
	sel       selector
	queuer    Queuer
	maxQueued int

	queued  atomic.Int64
	mu      sync.Mutex
	waiting map[string]*list.List // model name -> FIFO of *waiter
}

// waiter is one queued request.
type waiter struct {
	rc     *RoutingContext
	ticket *cache.Ticket
	elem   *list.Element
	// stopCancel unregisters the context's cancellation callback.
	stopCancel func() bool
}

func (q *queueRouter) Route(rc *RoutingContext) {
	if q.queued.Load() == 0 {
		t, err := q.sel.selectAndReserve(rc)
		if !errors.Is(err, errAllBusy) {
			q.settle(rc, t, err)
			return
		}
	}
	q.mu.Lock()
	fifo := q.waiting[rc.Model.Name]
	if fifo == nil {
		fifo = list.New()
		q.waiting[rc.Model.Name] = fifo
	}
	if fifo.Len() >= q.maxQueued {
		q.mu.Unlock()
		rc.Reject(ErrQueueFull)
		return
	}
	w := &waiter{rc: rc, ticket: q.queuer.Queue(rc.Model.Load().Queued())}
	w.elem = fifo.PushBack(w)
	q.queued.Add(1)
	w.stopCancel = context.AfterFunc(rc, func() { q.cancel(w) })
	q.mu.Unlock()
	// Capacity may have been released between the failed attempt and the enqueue.
	q.drain(rc.Model.Name)
}

// settle settles rc with the outcome of a selection, releasing the target if rc was
// already settled (its context ended first).
func (q *queueRouter) settle(rc *RoutingContext, t *Target, err error) {
	if err != nil {
		rc.Reject(err)
		return
	}
	model := rc.Model.Name
	t.onRelease = func() { q.drain(model) }
	if !rc.Resolve(t) {
		t.Release(0)
	}
}

// cancel removes w from its queue, if still there, and rejects it with its context's
// error.
func (q *queueRouter) cancel(w *waiter) {
	q.mu.Lock()
	removed := q.remove(w)
	q.mu.Unlock()
	if removed {
		w.rc.Reject(context.Cause(w.rc))
	}
}

// remove takes w out of its queue and reports whether it was there. The caller holds mu.
func (q *queueRouter) remove(w *waiter) bool {
	if w.elem == nil {
		return false
	}
	fifo := q.waiting[w.rc.Model.Name]
	fifo.Remove(w.elem)
	if fifo.Len() == 0 {
		delete(q.waiting, w.rc.Model.Name)
	}
	w.elem = nil
	w.ticket.Done()
	q.queued.Add(-1)
	return true
}

// drain routes the waiting requests of model in order until one finds every candidate
// busy again.
func (q *queueRouter) drain(model string) {
	// A request enqueued after this check drains on its own after enqueueing.
	if q.queued.Load() == 0 {
		return
	}
	for {
		q.mu.Lock()
		fifo := q.waiting[model]
		if fifo == nil {
			q.mu.Unlock()
			return
		}
		w := fifo.Front().Value.(*waiter)
		t, err := q.sel.selectAndReserve(w.rc)
		if errors.Is(err, errAllBusy) {
			q.mu.Unlock()
			return
		}
		q.remove(w)
		q.mu.Unlock()
		w.stopCancel()
		q.settle(w.rc, t, err)
	}
}
