package outlier

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Defaults of Config, which are also those of a RoutingPolicy's spec.outlierDetection.
const (
	DefaultConsecutiveFailures = 5
	DefaultBaseEjectionTime    = 30 * time.Second
	DefaultMaxEjectionPercent  = 50
	// MinMaxEjectionTime is the least upper bound of one ejection; the bound is the larger
	// of it and the base ejection time (Envoy's default max_ejection_time).
	MinMaxEjectionTime = 5 * time.Minute
)

// Config is the outlier detection in force for one request: a policy's, or the defaults.
type Config struct {
	// ConsecutiveFailures is the number of failures in a row that ejects an endpoint.
	ConsecutiveFailures int
	// BaseEjectionTime is the first ejection's length; the n-th in a row lasts n times it.
	BaseEjectionTime time.Duration
	// MaxEjectionPercent bounds the share of a candidate set that ejection leaves out.
	MaxEjectionPercent int
}

// DefaultConfig returns the configuration of rules without a policy.
func DefaultConfig() Config {
	return Config{
		ConsecutiveFailures: DefaultConsecutiveFailures,
		BaseEjectionTime:    DefaultBaseEjectionTime,
		MaxEjectionPercent:  DefaultMaxEjectionPercent,
	}
}

// maxEjectionTime bounds one ejection under c.
func (c Config) maxEjectionTime() time.Duration { return max(c.BaseEjectionTime, MinMaxEjectionTime) }

// Events receives the detector's state changes. Calls happen on request goroutines,
// at most once per change, and must not block.
type Events interface {
	// Ejected says that ep was ejected for d, its ejections-th ejection in a row.
	Ejected(ep endpoint.Key, address string, d time.Duration, ejections int)
	// Returned says that ep's ejection ended and it is a candidate again. It is reported
	// when a request next considers ep.
	Returned(ep endpoint.Key, address string)
}

// Detector keeps the ejection state of every endpoint that failed, per pod (namespace
// and name) and address: a pod whose address changes starts afresh. Create it with New;
// it is safe for concurrent use.
//
// Synchronisation model: hosts maps an endpoint.Key to its *host, replaced as a whole
// (CompareAndSwap) when the pod's address changes. Each host's fields are atomics
// written by the requests that report outcomes or consider the host; no lock is shared
// between endpoints. out counts hosts whose ejection has not been seen to end, so that
// Filter costs nothing while no endpoint is ejected.
type Detector struct {
	now    func() time.Time
	events Events
	hosts  sync.Map // endpoint.Key -> *host
	out    atomic.Int64
}

// host is the state of one endpoint at one address.
type host struct {
	key     endpoint.Key
	address string
	// failures is the number of failures in a row since the last success or ejection.
	failures atomic.Int32
	// ejections is how many times in a row the host was ejected, decayed by one per
	// base ejection time spent in; written only by the request whose ejection won.
	ejections atomic.Int32
	// until is when the last ejection ends (Unix nanoseconds), 0 if never ejected.
	until atomic.Int64
	// out is true from an ejection until a request sees that it ended.
	out atomic.Bool
}

// New returns a Detector reading the time from now (time.Now if nil) and reporting to
// events (nothing if nil).
func New(now func() time.Time, events Events) *Detector {
	if now == nil {
		now = time.Now
	}
	if events == nil {
		events = noEvents{}
	}
	return &Detector{now: now, events: events}
}

// lookup returns the host of ep at its current address, creating it if create is set
// (nil otherwise when there is none).
func (d *Detector) lookup(ep *endpoint.Endpoint, create bool) *host {
	v, ok := d.hosts.Load(ep.Key)
	for {
		if ok {
			h := v.(*host)
			if h.address == ep.Address {
				return h
			}
			if !create {
				return nil
			}
			fresh := &host{key: ep.Key, address: ep.Address}
			if d.hosts.CompareAndSwap(ep.Key, h, fresh) {
				if h.out.CompareAndSwap(true, false) {
					d.out.Add(-1) // the old address's ejection no longer applies
				}
				return fresh
			}
		} else {
			if !create {
				return nil
			}
			fresh := &host{key: ep.Key, address: ep.Address}
			if v, ok = d.hosts.LoadOrStore(ep.Key, fresh); !ok {
				return fresh
			}
			continue
		}
		v, ok = d.hosts.Load(ep.Key)
	}
}

// Success records an answer of ep that is not a failure: its failures in a row reset.
func (d *Detector) Success(ep *endpoint.Endpoint) {
	if h := d.lookup(ep, false); h != nil && h.failures.Load() != 0 {
		h.failures.Store(0)
	}
}

// Failure records a failure of ep and ejects it when it has failed cfg's number of times
// in a row and is not ejected already. It reports whether this call ejected ep.
func (d *Detector) Failure(ep *endpoint.Endpoint, cfg Config) bool {
	h := d.lookup(ep, true)
	if int(h.failures.Add(1)) < cfg.ConsecutiveFailures {
		return false
	}
	now := d.now().UnixNano()
	prev := h.until.Load()
	if now < prev {
		return false // ejected already: a request chose it past the cap
	}
	ejections := int64(h.ejections.Load())
	if prev != 0 && cfg.BaseEjectionTime > 0 {
		ejections -= (now - prev) / int64(cfg.BaseEjectionTime) // decay while it was in
	}
	ejections = max(ejections, 0) + 1
	length := min(time.Duration(ejections)*cfg.BaseEjectionTime, cfg.maxEjectionTime())
	if !h.until.CompareAndSwap(prev, now+int64(length)) {
		return false // another request ejected it meanwhile
	}
	h.ejections.Store(int32(ejections))
	h.failures.Store(0)
	if h.out.CompareAndSwap(false, true) {
		d.out.Add(1)
	}
	d.events.Ejected(h.key, h.address, length, int(ejections))
	return true
}

// Ejected reports whether ep is ejected now.
func (d *Detector) Ejected(ep *endpoint.Endpoint) bool {
	h := d.lookup(ep, false)
	return h != nil && d.now().UnixNano() < h.until.Load()
}

// EjectedCount returns the number of endpoints ejected now.
func (d *Detector) EjectedCount() int {
	if d.out.Load() == 0 {
		return 0
	}
	now := d.now().UnixNano()
	n := 0
	d.hosts.Range(func(_, v any) bool {
		if now < v.(*host).until.Load() {
			n++
		}
		return true
	})
	return n
}

// Filter returns cands without the ejected ones, in their order, but leaves in as many
// ejected candidates as needed, those whose ejection ends soonest, so that at most
// cfg.MaxEjectionPercent percent of cands (rounded down) are left out. It never writes to
// cands, which may be a candidate set that other requests share.
func (d *Detector) Filter(cands []*cache.Pod, cfg Config) []*cache.Pod {
	if d.out.Load() == 0 || len(cands) == 0 {
		return cands
	}
	now := d.now().UnixNano()
	type ejectedCand struct {
		i     int
		until int64
	}
	var ejected []ejectedCand
	for i, p := range cands {
		h := d.lookup(&p.Endpoint, false)
		if h == nil {
			continue
		}
		until := h.until.Load()
		if now < until {
			ejected = append(ejected, ejectedCand{i, until})
			continue
		}
		if h.out.CompareAndSwap(true, false) {
			d.out.Add(-1)
			d.events.Returned(h.key, h.address)
		}
	}
	if len(ejected) == 0 {
		return cands
	}
	allowed := len(cands) * cfg.MaxEjectionPercent / 100
	if len(ejected) > allowed {
		// Keep in the ones that return soonest; leave out the last `allowed`.
		slices.SortFunc(ejected, func(a, b ejectedCand) int { return cmp.Compare(a.until, b.until) })
		ejected = ejected[len(ejected)-allowed:]
	}
	if len(ejected) == 0 {
		return cands
	}
	drop := make(map[int]bool, len(ejected))
	for _, e := range ejected {
		drop[e.i] = true
	}
	out := make([]*cache.Pod, 0, len(cands)-len(ejected)) // cands may be shared: never written
	for i, p := range cands {
		if !drop[i] {
			out = append(out, p)
		}
	}
	return out
}

type noEvents struct{}

func (noEvents) Ejected(endpoint.Key, string, time.Duration, int) {}
func (noEvents) Returned(endpoint.Key, string)                    {}
