package cache

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Hot is one pod's state that routing decisions read for every candidate: its request
// counters and the summary of its latest metrics snapshot, in two cache lines and free
// of pointers. Cells are allocated in slabs in the order pods are added, and candidate
// sets list them beside their pods (PodSet), so that a decision over thousands of
// candidates reads one small cell each, mostly in sequence, rather than chasing pointers
// from each Pod. A Hot is shared by every version of its pod.
//
// Synchronisation model: the counters are atomic (see Load). Each word of the summary is
// stored and loaded atomically, without a lock on the read side: a reader racing a store
// may combine words of two consecutive snapshots of the engine, which routing tolerates
// as it tolerates metrics one scrape old. The words are written by podState, which
// serialises its writers.
type Hot struct {
	Load
	summary [summaryWords]atomic.Uint64
}

// summaryWords is the size of the stored endpoint.Summary in 64-bit words.
const summaryWords = 12

// The summary's words.
const (
	wordScrapedAt = iota
	wordUsage
	wordGeometry // BlockSize<<32 | NumGPUBlocks
	wordRunning
	wordWaiting
	wordLocalInFlight
	wordSlots
	wordPrefill
	wordService
	wordDecode
	wordLearnt
	wordEpoch
)

// hotSlab is the number of cells allocated together: one 8 KiB allocation, which holds
// no pointer and so starts on a page, keeping every cell within its two cache lines.
const hotSlab = 64

// hotAllocator hands out cells from slabs. It is not safe for concurrent use; the Cache
// calls it under its writer lock.
type hotAllocator struct{ slab []Hot }

// next returns a fresh cell.
func (a *hotAllocator) next() *Hot {
	if len(a.slab) == 0 {
		a.slab = make([]Hot, hotSlab)
	}
	h := &a.slab[0]
	a.slab = a.slab[1:]
	return h
}

// podState is the state every version of a pod shares: its hot cell and its latest
// metrics snapshot. mu serialises the writers of both; gen counts the resets (the pod
// moved to another address), and a scrape of an older gen is discarded under mu, so that
// nothing of the old address's engine is stored after a reset.
type podState struct {
	hot     *Hot
	metrics atomic.Pointer[endpoint.Metrics]
	mu      sync.Mutex
	gen     uint64 // guarded by mu
}

// store makes m the latest snapshot if the state is still at gen, and reports whether it
// did; it returns the snapshot it replaced.
func (st *podState) store(gen uint64, m *endpoint.Metrics) (old *endpoint.Metrics, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gen != gen {
		return nil, false
	}
	w := toWords(m.Summary())
	st.hot.write(&w)
	return st.metrics.Swap(m), true
}

// reset forgets the metrics and starts a new gen, returning it.
func (st *podState) reset() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.gen++
	st.hot.write(&[summaryWords]uint64{})
	st.metrics.Store(nil)
	return st.gen
}

// Summary returns the summary of the latest metrics snapshot, the zero Summary before
// the first scrape.
func (h *Hot) Summary() endpoint.Summary {
	w := &h.summary
	kv := h.KV()
	return endpoint.Summary{
		ScrapedAt:     kv.ScrapedAt,
		KVCacheUsage:  kv.Usage,
		BlockSize:     kv.BlockSize,
		NumGPUBlocks:  kv.NumGPUBlocks,
		Running:       math.Float64frombits(w[wordRunning].Load()),
		Waiting:       math.Float64frombits(w[wordWaiting].Load()),
		LocalInFlight: int64(w[wordLocalInFlight].Load()),
		Speed: endpoint.Speed{
			Slots:           math.Float64frombits(w[wordSlots].Load()),
			PrefillPerToken: math.Float64frombits(w[wordPrefill].Load()),
			Service:         math.Float64frombits(w[wordService].Load()),
			DecodePerToken:  math.Float64frombits(w[wordDecode].Load()),
			Learnt:          w[wordLearnt].Load() != 0,
		},
		Epoch: w[wordEpoch].Load(),
	}
}

// KV is the part of a metrics summary that least-kv-cache reads.
type KV struct {
	// ScrapedAt, BlockSize and NumGPUBlocks are the endpoint.Summary fields of those
	// names; Usage is its KVCacheUsage.
	ScrapedAt               int64
	Usage                   float64
	BlockSize, NumGPUBlocks int64
}

// KV returns the KV part of the latest snapshot's summary: Summary, reading three words.
func (h *Hot) KV() KV {
	w := &h.summary
	at := int64(w[wordScrapedAt].Load()) // first: see write
	g := w[wordGeometry].Load()
	return KV{at, math.Float64frombits(w[wordUsage].Load()), int64(g >> 32), int64(g & math.MaxUint32)}
}

// write stores the summary words, the scrape time (word 0) last, so that a reader that
// loads a snapshot's time first sees the rest of that snapshot or a later one. The
// caller holds the mu of the pod's podState.
func (h *Hot) write(w *[summaryWords]uint64) {
	for i := len(w) - 1; i >= 0; i-- {
		h.summary[i].Store(w[i])
	}
}

// geometryWord returns n as one half of the geometry word, 0 when it does not fit.
func geometryWord(n int64) uint32 {
	if n < 0 || n > math.MaxUint32 {
		return 0
	}
	return uint32(n)
}

// toWords lays s out as the cell stores it.
func toWords(s endpoint.Summary) [summaryWords]uint64 {
	learnt := uint64(0)
	if s.Speed.Learnt {
		learnt = 1
	}
	return [summaryWords]uint64{
		uint64(s.ScrapedAt),
		math.Float64bits(s.KVCacheUsage),
		uint64(geometryWord(s.BlockSize))<<32 | uint64(geometryWord(s.NumGPUBlocks)),
		math.Float64bits(s.Running),
		math.Float64bits(s.Waiting),
		uint64(s.LocalInFlight),
		math.Float64bits(s.Speed.Slots),
		math.Float64bits(s.Speed.PrefillPerToken),
		math.Float64bits(s.Speed.Service),
		math.Float64bits(s.Speed.DecodePerToken),
		learnt,
		s.Epoch,
	}
}

// PodSet is an immutable list of pods with, index for index, their hot cells: the form
// in which candidates reach routing decisions. Its slices MUST NOT be modified.
type PodSet struct {
	// Pods are the pods.
	Pods []*Pod
	// Hot are the pods' cells: Hot[i] is Pods[i].Hot().
	Hot []*Hot
}

// NewPodSet returns the set of pods, which it keeps.
func NewPodSet(pods []*Pod) PodSet {
	hot := make([]*Hot, len(pods))
	for i, p := range pods {
		hot[i] = p.hot
	}
	return PodSet{Pods: pods, Hot: hot}
}

// Len returns the number of pods.
func (s PodSet) Len() int { return len(s.Pods) }
