package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/percore"
)

// Load counts the requests of one endpoint or one model. All methods are safe for
// concurrent use; the counters are written only through a Tracker (reservations and queue
// tickets) and read by anyone.
type Load struct {
	// inFlight is the in-flight count, kept apart from the other counters: a pod's in
	// its cache's dense array of counts (see Count), a model stripe's beside the stripe.
	// A Load without one, such as the zero Load, counts waiting requests only.
	inFlight  *Count
	waiting   atomic.Int64
	tokensIn  atomic.Int64
	tokensOut atomic.Int64
	// started sums the start times of the in-flight reservations on an endpoint, in
	// nanoseconds of loadClock; a model's stripes leave it zero.
	started atomic.Int64
}

// Count is the number of requests in flight on one endpoint or model stripe. The cache
// keeps the counts of its pods side by side in 4 KiB slabs, eight to a cache line (see
// hotAllocator.count for their order), and candidate sets list them beside the cells
// (PodSet.Counts): a decision that reads nothing else of a pod, as least-request's, then
// reads 16 bytes per candidate, a pointer and a count, instead of a cell's cache line.
type Count struct{ n atomic.Int64 }

// Value returns the count.
func (c *Count) Value() int64 { return c.n.Load() }

// loadEpoch is the origin of loadClock.
var loadEpoch = time.Now()

// loadClock returns t in nanoseconds since loadEpoch, on the monotonic clock when t has
// a reading of it: small enough that the start times of millions of requests sum
// without overflow.
func loadClock(t time.Time) int64 { return int64(t.Sub(loadEpoch)) }

// loadNow is loadClock(time.Now()), read off the monotonic clock alone, which costs
// about half of time.Now.
func loadNow() int64 { return int64(time.Since(loadEpoch)) }

// InFlight returns the number of reserved, unreleased requests.
func (l *Load) InFlight() int64 { return l.inFlight.n.Load() }

// Waiting returns the number of requests queued in the router for this target.
func (l *Load) Waiting() int64 { return l.waiting.Load() }

// TokensIn returns the cumulative number of prompt tokens of reserved requests.
func (l *Load) TokensIn() int64 { return l.tokensIn.Load() }

// TokensOut returns the cumulative number of tokens reported on release.
func (l *Load) TokensOut() int64 { return l.tokensOut.Load() }

// MeanAge returns how long, on average, the endpoint's in-flight reservations have run
// as of now; 0 when there are none. The two counters it reads are not read in one step,
// so a reservation made or released meanwhile can skew it; it is never negative.
func (l *Load) MeanAge(now time.Time) time.Duration {
	n := l.inFlight.n.Load()
	if n <= 0 {
		return 0
	}
	return time.Duration(max(loadClock(now)-l.started.Load()/n, 0))
}

// tryAcquire increments the in-flight count if it is below limit; limit <= 0 means no limit.
func (l *Load) tryAcquire(limit int64) bool {
	c := &l.inFlight.n
	if limit <= 0 {
		c.Add(1)
		return true
	}
	for {
		n := c.Load()
		if n >= limit {
			return false
		}
		if c.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// ModelLoad counts the requests of one model. A reservation counts on the stripe of the
// core it is made on (percore.Stripes), so that requests on different cores write no
// line in common and no line moves between the cores' caches; the readers, which are
// rare (metrics exports), sum the stripes. Queued requests are counted apart (Queued).
// Make one with newModelLoad.
type ModelLoad struct {
	queued  Load
	stripes percore.Stripes[modelStripe]
}

// modelStripe is one stripe of a ModelLoad: its counters and the in-flight count that
// its Load points to.
type modelStripe struct {
	Load
	count Count
}

// newModelLoad returns a ModelLoad with nothing counted.
func newModelLoad() *ModelLoad {
	l := new(ModelLoad)
	for s := range l.stripes.All() {
		s.inFlight = &s.count
	}
	return l
}

// InFlight returns the number of reserved, unreleased requests.
func (l *ModelLoad) InFlight() int64 { return l.sum((*Load).InFlight) }

// TokensIn returns the cumulative number of prompt tokens of reserved requests.
func (l *ModelLoad) TokensIn() int64 { return l.sum((*Load).TokensIn) }

// TokensOut returns the cumulative number of tokens reported on release.
func (l *ModelLoad) TokensOut() int64 { return l.sum((*Load).TokensOut) }

// Waiting returns the number of requests queued in the router for this model.
func (l *ModelLoad) Waiting() int64 { return l.queued.Waiting() }

// Queued returns the counter a queue counts the model's waiting requests on
// (Tracker.Queue); it counts nothing in flight.
func (l *ModelLoad) Queued() *Load { return &l.queued }

// sum returns the sum of one counter over the stripes.
func (l *ModelLoad) sum(counter func(*Load) int64) int64 {
	var n int64
	for s := range l.stripes.All() {
		n += counter(&s.Load)
	}
	return n
}

// stripe returns the stripe of the calling core.
func (l *ModelLoad) stripe() *Load { return &l.stripes.Local().Load }

// Tracker counts requests on endpoints and models: reservations for requests sent to an
// endpoint, tickets for requests waiting in a router's queue. Only the gateway's view of
// the cache hands one out; other roles read the counters but never change them. The zero
// Tracker is ready to use and it is safe for concurrent use.
type Tracker struct{}

// Reserve counts one request with tokensIn prompt tokens on p and on m.
func (Tracker) Reserve(m *Model, p *Pod, tokensIn int64) *Reservation {
	r := new(Reservation)
	Tracker{}.TryReserveInto(r, m, p, 0, tokensIn)
	return r
}

// TryReserveInto is Reserve into r, an unused Reservation, if p has fewer than limit
// requests in flight, checked and incremented in one atomic step; limit <= 0 means no
// limit. It reports false, and reserves nothing, when p is at the limit. A nil m counts
// the request on p alone: a plain Gateway API request, which names no model. Reserving
// into the caller's memory lets a routing decision allocate nothing.
func (Tracker) TryReserveInto(r *Reservation, m *Model, p *Pod, limit, tokensIn int64) bool {
	l := p.Load()
	if !l.tryAcquire(limit) {
		return false
	}
	l.tokensIn.Add(tokensIn)
	r.started = loadNow()
	l.started.Add(r.started)
	r.pod = p
	if m != nil {
		ml := m.load.stripe()
		ml.inFlight.n.Add(1)
		ml.tokensIn.Add(tokensIn)
		r.model = ml
	}
	return true
}

// Queue records that a request started waiting for the target counted by l and returns a
// Ticket whose Done ends the wait.
func (Tracker) Queue(l *Load) *Ticket {
	l.waiting.Add(1)
	return &Ticket{load: l}
}

// Ticket is one request's wait in a queue. Done may be called any number of times from
// any goroutine; only the first call has an effect.
type Ticket struct {
	once sync.Once
	load *Load
}

// Done ends the wait.
func (t *Ticket) Done() {
	t.once.Do(func() { t.load.waiting.Add(-1) })
}

// Reservation is one request's claim on an endpoint, counted on both the endpoint and the
// model (on the endpoint alone for a request that names no model). Release may be called
// any number of times from any goroutine; only the first call has an effect. A
// Reservation MUST NOT be copied once made.
type Reservation struct {
	state   atomic.Int32 // reserved, decoding or released
	pod     *Pod
	model   *Load // the model's stripe; nil for a request that names no model
	started int64 // loadClock at the reservation, counted in the pod's Load.started
	// decode is the request's decode, listed in the pod's decodes while it is decoding;
	// written under their lock.
	decode decodeSpan
}

// The states of a Reservation: it moves from reserved to released, possibly by way of
// decoding (Decoding).
const (
	reserved int32 = iota
	decoding
	released
)

// Pod returns the reserved endpoint.
func (r *Reservation) Pod() *Pod { return r.pod }

// Release ends the reservation and adds tokensOut generated tokens to the endpoint and
// model counters.
func (r *Reservation) Release(tokensOut int64) {
	switch r.state.Swap(released) {
	case released:
		return
	case decoding:
		r.pod.state.decodes.end(r)
	}
	r.pod.Load().started.Add(-r.started)
	for _, l := range [...]*Load{r.pod.Load(), r.model} {
		if l != nil {
			l.tokensOut.Add(tokensOut)
			l.inFlight.n.Add(-1)
		}
	}
}
