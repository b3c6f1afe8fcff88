package ttft

import (
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// PooledTTL is how long Pooled reuses the pooled speed of a candidate set: a tenth of
// the default scrape interval, well within the noise of the speeds learnt from scrapes.
const PooledTTL = 10 * time.Millisecond

// pooledSlots is the number of candidate sets a Pooled remembers at once.
const pooledSlots = 8

// Pooled remembers, for the few candidate sets an algorithm decides over, the Fleet of
// their cells with fresh metrics for PooledTTL, so that a decision over thousands of
// candidates does not read the speed of each: a scrape, or a cell turning stale, counts
// in the pool within PooledTTL. It counts cells of every in-flight count, for decisions
// without an admission bound. The zero value is ready to use and safe for concurrent
// use.
type Pooled struct {
	slots [pooledSlots]atomic.Pointer[pool]
	next  atomic.Uint32 // the slot a new candidate set takes, round the slots
}

// pool is the Fleet of one candidate set, as of one time.
type pool struct {
	first      **cache.Hot // the slot of the set's first cell, as the set's identity
	n          int
	staleAfter time.Duration
	at         int64 // when it was summed, in Unix nanoseconds
	fleet      Fleet
}

// Fleet returns the Fleet of the cells, a candidate set the caller does not modify,
// whose metrics are fresh at now, staleAfter being the age at which metrics turn stale.
func (p *Pooled) Fleet(cells []*cache.Hot, now time.Time, staleAfter time.Duration) Fleet {
	if len(cells) == 0 {
		return Fleet{}
	}
	t := now.UnixNano()
	var slot *atomic.Pointer[pool]
	for i := range p.slots {
		if e := p.slots[i].Load(); e != nil && e.first == &cells[0] && e.n == len(cells) && e.staleAfter == staleAfter {
			if t >= e.at && t < e.at+int64(PooledTTL) {
				return e.fleet
			}
			slot = &p.slots[i]
			break
		}
	}
	if slot == nil { // a set new to p
		slot = &p.slots[p.next.Add(1)%pooledSlots]
	}
	e := &pool{first: &cells[0], n: len(cells), staleAfter: staleAfter, at: t}
	oldest := t - int64(staleAfter)
	for _, h := range cells {
		e.fleet.AddCell(h, oldest)
	}
	slot.Store(e)
	return e.fleet
}
