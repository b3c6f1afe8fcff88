package prefixcache

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// BytesPerBlock is the heap an index is accounted per block hash it holds: measured with
// runtime.MemStats (BenchmarkIndexMemory, TestBudgetBoundsMemory) at 44 to 72 bytes,
// about 58 on average, depending on how far each endpoint's map and node slice are into
// their growth.
const BytesPerBlock = 64

// DefaultMemoryBytes is a sensible Budget for a gateway's prefix indexes: 256 MiB, about
// 4 million blocks, or 64 endpoints at DefaultMaxBlocksPerEndpoint.
const DefaultMemoryBytes = 256 << 20

// Budget bounds the memory of every index that shares it, whatever their per-endpoint
// bounds. Each endpoint's set is accounted the BytesPerBlock of each block it has room
// for (its high-water mark since it was last compacted); an Add that takes the total
// beyond the budget then evicts, before returning, until the total is 7/8 of the budget:
// the sets learnt into least recently (across every index) first, each losing its least
// recently used blocks, at least a quarter of them, and compacted so that their memory
// is freed. An index that is garbage collected releases what it was accounted. Create a
// Budget with NewBudget; it is safe for concurrent use.
//
// Synchronisation model: used is atomic, updated by the sets, under their
// own locks, without any lock of the budget, so learning takes no global lock. evicting
// admits one evicting Add at a time; the others go on, the evicting one rechecking the
// total after unlocking. mu guards indexes, the weak references through which an
// eviction finds the sets; it is held only to register, unregister or list indexes,
// never with a set's lock.
type Budget struct {
	limit, low int64 // bytes: evict beyond limit, down to low
	used       atomic.Int64
	evicting   sync.Mutex
	mu         sync.Mutex
	indexes    map[*ledger]weak.Pointer[Index]
}

// NewBudget returns a budget of bytes bytes; bytes < 1 means no bound.
func NewBudget(bytes int64) *Budget {
	if bytes < 1 {
		bytes = math.MaxInt64
	}
	return &Budget{limit: bytes, low: bytes - bytes/8, indexes: make(map[*ledger]weak.Pointer[Index])}
}

// Used returns the bytes accounted to the indexes sharing b.
func (b *Budget) Used() int64 { return b.used.Load() }

// ledger is what one index is accounted, kept apart from the index so that the cleanup
// that releases it when the index is collected does not keep the index alive.
type ledger struct {
	budget *Budget
	bytes  atomic.Int64
}

// add accounts blocks more blocks (fewer when negative) to l; a nil ledger (an index
// without a budget) accounts nothing.
func (l *ledger) add(blocks int) {
	if l == nil {
		return
	}
	d := int64(blocks) * BytesPerBlock
	l.bytes.Add(d)
	l.budget.used.Add(d)
}

// enforce makes l's budget evict if it is over its limit; a nil ledger has none.
func (l *ledger) enforce() {
	if l != nil {
		l.budget.enforce()
	}
}

// learnClock orders the sets by their last Add: monotonic nanoseconds since the process
// started, read without a counter that every Add of every index would write.
func learnClock() uint64 { return uint64(time.Since(clockStart)) }

// clockStart is learnClock's origin.
var clockStart = time.Now()

// register makes ix's sets accountable to b, until ix is garbage collected.
func (b *Budget) register(ix *Index) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.indexes[ix.ledger] = weak.Make(ix)
	runtime.AddCleanup(ix, b.unregister, ix.ledger)
}

// unregister releases what l's index, now collected, was accounted.
func (b *Budget) unregister(l *ledger) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.indexes, l)
	b.used.Add(-l.bytes.Swap(0))
}

// enforce evicts while b is over its limit, no other caller is evicting and evicting
// frees something: what b still accounts to indexes collected but not yet unregistered
// cannot be evicted.
func (b *Budget) enforce() {
	for b.used.Load() > b.limit && b.evicting.TryLock() {
		freed := b.evict()
		b.evicting.Unlock()
		if !freed {
			return
		}
	}
}

// evict sheds blocks of the sets learnt into least recently until b is down to its low
// mark, and reports whether it freed any. The caller holds b.evicting.
func (b *Budget) evict() bool {
	sets := b.sets()
	// Each set's time is read once: Adds meanwhile must not reorder the sort.
	slices.SortFunc(sets, func(x, y learntSet) int { return cmp.Compare(x.at, y.at) })
	freed := false
	for _, ls := range sets {
		set := ls.set
		need := b.used.Load() - b.low
		if need <= 0 {
			break
		}
		if set.shed(int((need + BytesPerBlock - 1) / BytesPerBlock)) {
			freed = true
		}
	}
	return freed
}

// learntSet is a set with the time of its last Add, as an eviction read it.
type learntSet struct {
	at  uint64
	set *blockLRU
}

// sets returns every set of the live indexes sharing b, with its last Add's time.
func (b *Budget) sets() []learntSet {
	b.mu.Lock()
	indexes := make([]*Index, 0, len(b.indexes))
	for _, wp := range b.indexes {
		if ix := wp.Value(); ix != nil {
			indexes = append(indexes, ix)
		}
	}
	b.mu.Unlock()
	var sets []learntSet
	for _, ix := range indexes {
		ix.endpoints.Range(func(_, v any) bool {
			set := v.(*blockLRU)
			sets = append(sets, learntSet{set.lastAdd.Load(), set})
			return true
		})
	}
	return sets
}
