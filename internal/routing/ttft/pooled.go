package ttft

import (
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// PooledTTL is how long Pooled reuses the pooled speed of a candidate set while its
// cells' metrics change: a tenth of the default scrape interval, well within the noise
// of the speeds learnt from scrapes.
const PooledTTL = 10 * time.Millisecond

// pooledSlots is the number of candidate sets a Pooled remembers at once.
const pooledSlots = 8

// Pooled remembers, for the few candidate sets an algorithm decides over, the Fleet of
// their cells with fresh metrics, so that a decision over thousands of candidates reads
// the speed of each only when the pool may have changed: when some cell's metrics were
// written (cache.SummaryWrites) and the pool is older than PooledTTL, or a cell counted
// fresh turned stale. It counts cells of every in-flight count, for decisions without
// an admission bound. The zero value is ready to use and safe for concurrent use.
type Pooled struct {
	slots [pooledSlots]atomic.Pointer[pool]
	next  atomic.Uint32 // the slot a new candidate set takes, round the slots
}

// pool is the Fleet of one candidate set, as of one time.
type pool struct {
	first      **cache.Hot // the slot of the set's first cell, as the set's identity
	n          int
	staleAfter time.Duration
	writes     uint64 // cache.SummaryWrites when the pool was summed
	at         int64  // when it was summed, in Unix nanoseconds
	staleAt    int64  // when the first cell counted fresh turns stale
	fleet      Fleet
}

// Fleet returns the Fleet of the cells, a candidate set the caller does not modify,
// whose metrics are fresh at now, staleAfter being the age at which metrics turn stale.
func (p *Pooled) Fleet(cells []*cache.Hot, now time.Time, staleAfter time.Duration) Fleet {
	if len(cells) == 0 {
		return Fleet{}
	}
	id, t, writes := &cells[0], now.UnixNano(), cache.SummaryWrites()
	for i := range p.slots {
		if e := p.slots[i].Load(); e != nil && e.matches(id, len(cells), staleAfter) {
			if e.current(t, writes) {
				return e.fleet
			}
			e = sum(id, cells, t, staleAfter, writes)
			p.slots[i].Store(e)
			return e.fleet
		}
	}
	e := sum(id, cells, t, staleAfter, writes)
	p.slots[p.next.Add(1)%pooledSlots].Store(e)
	return e.fleet
}

// matches reports whether e is the pool of the candidate set whose first cell's slot is
// id, of n cells, under staleAfter.
func (e *pool) matches(id **cache.Hot, n int, staleAfter time.Duration) bool {
	return e.first == id && e.n == n && e.staleAfter == staleAfter
}

// current reports whether e still holds at t, writes being cache.SummaryWrites.
func (e *pool) current(t int64, writes uint64) bool {
	return t >= e.at && t < e.staleAt && (writes == e.writes || t < e.at+int64(PooledTTL))
}

// sum returns the pool of cells at t: the Fleet of those scraped within staleAfter.
func sum(id **cache.Hot, cells []*cache.Hot, t int64, staleAfter time.Duration, writes uint64) *pool {
	e := &pool{first: id, n: len(cells), staleAfter: staleAfter, writes: writes, at: t, staleAt: 1<<63 - 1}
	oldest := t - int64(staleAfter)
	for _, h := range cells {
		if at := h.ScrapedAt(); at >= oldest {
			e.fleet.Add(h.Speed(), h.Slots())
			e.staleAt = min(e.staleAt, at+int64(staleAfter)+1)
		}
	}
	return e
}
