package cache

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Hot is the summary of one pod's latest metrics snapshot, the part of a pod that
// routing decisions read for every candidate besides its in-flight count: eleven words,
// free of pointers and written only by scrapes. A Hot is shared by every version of its
// pod.
//
// Cells are allocated in slabs in the order pods are added, and candidate sets list them
// beside their pods (PodSet). A slab stores its cells word by word (hotCells): word 0 of
// every cell side by side, then word 1 of every cell, and so on. A Hot is a view of one
// cell's column: its word w is w rows after its word 0, and the words between are the
// other cells'. So a decision over thousands of candidates reads, of each, only the
// words it needs, eight candidates' to a cache line for pods added one after another:
// least-kv-cache reads three words, 24 bytes, of a candidate, where a cell kept whole
// would cost it a 64-byte line. A Hot MUST come from a hotAllocator; one made otherwise
// holds its words and nothing of other cells, but is as large as a slab.
//
// Synchronisation model: each word of the summary is stored and loaded atomically,
// without a lock on the read side: a reader racing a store may combine words of two
// consecutive snapshots of the engine, which routing tolerates as it tolerates metrics
// one scrape old. The words are written by podState, which serialises its writers.
type Hot struct {
	words [summaryWords]struct {
		atomic.Uint64
		_ [hotSlab - 1]uint64 // the same word of the slab's other cells
	}
}

// summaryWords is the size of a stored metrics summary in 64-bit words.
const summaryWords = 11

// The summary's words.
const (
	wordScrapedAt = iota
	wordUsage
	wordGeometry // BlockSize<<32 | NumGPUBlocks
	wordBeyond
	wordSlots // the float32 bits of Profile.Slots<<32 | those of Profile.Decode
	wordPrefill
	wordEpoch // Profile.Epoch, with learntBit set when the speed is learnt
	wordWork  // the float32 bits of Running<<32 | those of Profile.Throughput (NaN when not known)
	wordService
	wordWaiting // the float32 bits of Waiting<<32 | LocalInFlight
	wordDecode
)

// hotSlab is the number of cells allocated together: a row of a slab is 4 KiB, so that a
// decision reading a word of pods added one after another reads a page of it in sequence,
// which the processor's prefetcher follows, before it moves on to the next slab.
const hotSlab = 512

// hotCells is a slab of cells stored word by word: row w holds word w of every cell.
// The Hot of cell j starts at row 0's word j and spans the rows after it, up to the
// spare last row, which keeps the last cell's Hot within the slab. The slab, 48 KiB, is
// allocated in whole pages, so every row starts on a page.
type hotCells [summaryWords + 1][hotSlab]uint64

// learntBit marks, in the epoch word, a learnt speed (Speed.Learnt); an epoch counts
// restarts and never comes near it.
const learntBit = 1 << 63

// countSlab is the number of in-flight counts allocated together, 4 KiB: countLines
// cache lines of eight counts each.
const (
	countSlab  = 512
	countLines = countSlab / 8
)

// hotAllocator hands out cells and in-flight counts from slabs. It is not safe for
// concurrent use; the Cache calls it under its writer lock.
type hotAllocator struct {
	// slab is where the next cells come from, the first free of them at nextCell.
	slab     *hotCells
	nextCell int
	counts   []Count
	// nextCount is the number of counts handed out of the current slab.
	nextCount int
}

// next returns a fresh cell: the column of the current slab that starts at the next
// word of its first row.
func (a *hotAllocator) next() *Hot {
	if a.nextCell == 0 {
		a.slab = new(hotCells)
	}
	h := (*Hot)(unsafe.Pointer(&a.slab[0][a.nextCell]))
	a.nextCell = (a.nextCell + 1) % hotSlab
	return h
}

// count returns a fresh count. The counts of a slab are handed out a cache line apart,
// the next line each time, so that pods added one after another, which round-robin
// reserves one after another from different cores, write different lines; a pass over
// the pods in that order still reads each line of the slab eight times while it holds
// the slab's 4 KiB.
func (a *hotAllocator) count() *Count {
	if a.nextCount == 0 {
		a.counts = make([]Count, countSlab)
	}
	j := a.nextCount
	a.nextCount = (j + 1) % countSlab
	return &a.counts[j%countLines*8+j/countLines]
}

// podState is the state every version of a pod shares: its request counters, its hot
// cell and its latest metrics snapshot. mu serialises the writers of the cell and the
// snapshot; gen counts the resets (the pod moved to another address), and a scrape of an
// older gen is discarded under mu, so that nothing of the old address's engine is stored
// after a reset.
//
// A podState is three cache lines, the first the counters that reservations write (all
// but the in-flight count, which is in a slab of counts), the second what scrapes write,
// the third the decodes that streamed answers write as they begin and end: 192 bytes, a
// size class of the Go allocator whose objects start on line boundaries, so that
// reservations of two pods, such as two made at once on two cores by round-robin, write
// no line in common.
type podState struct {
	load Load
	hot  *Hot
	_    [64 - unsafe.Sizeof(Load{}) - unsafe.Sizeof((*Hot)(nil))]byte
	// id holds the pod's key as text (endpoint.Key.String), made once for every
	// version, as the one value of a header.
	id      []string
	metrics atomic.Pointer[endpoint.Metrics]
	mu      sync.Mutex
	gen     uint64 // guarded by mu
	_       [64 - unsafe.Sizeof([]string{}) - unsafe.Sizeof(atomic.Pointer[endpoint.Metrics]{}) - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(uint64(0))]byte
	// decodes lists the pod's decoding requests.
	decodes decodes
	_       [64 - unsafe.Sizeof(decodes{})]byte
}

// newPodState returns the shared state of a new pod k, with a fresh cell. The caller
// holds c.mu.
func (c *Cache) newPodState(k endpoint.Key) *podState {
	return &podState{load: Load{inFlight: c.cells.count()}, hot: c.cells.next(), id: []string{k.String()}}
}

// store makes m the latest snapshot if the state is still at gen, and reports whether it
// did; it returns the snapshot it replaced.
func (st *podState) store(gen uint64, m *endpoint.Metrics) (old *endpoint.Metrics, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gen != gen {
		return nil, false
	}
	w := summaryOf(m)
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

// The accessors below read the summary of the latest metrics snapshot, zero before the
// first scrape. Each returns a few words, so that a decision keeps them in registers;
// together they are the snapshot's summary (summaryOf).

// ScrapedAt returns when the latest snapshot was scraped, in Unix nanoseconds; 0 means
// none. Decisions load it before the other words (see write).
func (h *Hot) ScrapedAt() int64 { return int64(h.words[wordScrapedAt].Load()) }

// Usage returns the latest snapshot's scrape time and KV cache usage
// (Metrics.UsedKVCache). The cache's geometry, which only a pod with requests in flight
// needs, is apart (Geometry).
func (h *Hot) Usage() (scrapedAt int64, usage float64) {
	at := h.ScrapedAt() // first: see write
	return at, h.PeekUsage()
}

// PeekUsage returns the latest snapshot's KV cache usage as Usage does, without loading
// the scrape time first: the usage of a snapshot no later than the one a Usage after it
// returns. A decision skips on it the pods whose usage alone already ranks them worse.
func (h *Hot) PeekUsage() float64 { return math.Float64frombits(h.words[wordUsage].Load()) }

// Geometry returns the latest snapshot's block size and number of GPU blocks (the
// Metrics fields of those names); 0 for a value that does not fit in 32 bits.
func (h *Hot) Geometry() (blockSize, numGPUBlocks int64) {
	g := h.words[wordGeometry].Load()
	return int64(g >> 32), int64(g & math.MaxUint32)
}

// Queue returns the latest snapshot's queue (Metrics.Queue), its running and waiting
// counts rounded to float32 (exact below 1<<24).
func (h *Hot) Queue() endpoint.Queue {
	ww := h.words[wordWaiting].Load()
	return endpoint.Queue{
		Running:       float64(math.Float32frombits(uint32(h.words[wordWork].Load() >> 32))),
		Waiting:       float64(math.Float32frombits(uint32(ww >> 32))),
		LocalInFlight: int64(uint32(ww)),
		Slots:         h.Slots(),
	}
}

// Throughput is what a snapshot tells of an engine's recent work.
type Throughput struct {
	// ScrapedAt is Hot.ScrapedAt; TokensPerSecond and Known are Profile.Throughput and
	// Profile.ThroughputKnown, TokensPerSecond meaningless (NaN or 0) when not known;
	// Running is Metrics.Running, as Queue returns it.
	ScrapedAt       int64
	TokensPerSecond float64
	Known           bool
	Running         float64
}

// Throughput returns the latest snapshot's Throughput.
func (h *Hot) Throughput() Throughput {
	at := int64(h.words[wordScrapedAt].Load()) // first: see write
	work := h.words[wordWork].Load()
	rate := float64(math.Float32frombits(uint32(work)))
	return Throughput{ScrapedAt: at, TokensPerSecond: rate, Known: at != 0 && rate == rate, // NaN: not known
		Running: float64(math.Float32frombits(uint32(work >> 32)))}
}

// Backlog is the part of a snapshot that a prediction of the time to first token reads
// of an engine where a request would not wait.
type Backlog struct {
	// Beyond is Beyond of the snapshot's queue.
	Beyond float64
	// Slots is the learnt slot count (Queue.Slots), 0 when not learnt.
	Slots float64
	// PrefillPerToken and Learnt are the Speed fields of those names.
	PrefillPerToken float64
	Learnt          bool
}

// Backlog returns the latest snapshot's Backlog.
func (h *Hot) Backlog() Backlog {
	return Backlog{
		Beyond:          math.Float64frombits(h.words[wordBeyond].Load()),
		Slots:           h.Slots(),
		PrefillPerToken: math.Float64frombits(h.words[wordPrefill].Load()),
		Learnt:          h.words[wordEpoch].Load()&learntBit != 0,
	}
}

// Beyond returns the requests q's engine held at its scrape beyond this process's
// (Running+Waiting-LocalInFlight), or 0 when it held none beyond them.
func Beyond(q endpoint.Queue) float64 {
	return max(q.Running+q.Waiting-float64(q.LocalInFlight), 0)
}

// Slots returns the latest snapshot's learnt slot count (Queue.Slots), alone; a cell
// holds it to float32 precision, exact for counts.
func (h *Hot) Slots() float64 {
	return float64(math.Float32frombits(uint32(h.words[wordSlots].Load() >> 32)))
}

// Speed returns the speed of the latest snapshot's engine (Profile.Speed).
func (h *Hot) Speed() endpoint.Speed {
	return endpoint.Speed{
		PrefillPerToken: math.Float64frombits(h.words[wordPrefill].Load()),
		Service:         math.Float64frombits(h.words[wordService].Load()),
		DecodePerToken:  math.Float64frombits(h.words[wordDecode].Load()),
		Learnt:          h.words[wordEpoch].Load()&learntBit != 0,
	}
}

// DecodePerToken returns the latest snapshot's time per output token
// (Profile.DecodePerToken), alone: one word, where Speed reads four.
func (h *Hot) DecodePerToken() float64 { return math.Float64frombits(h.words[wordDecode].Load()) }

// Decode returns the latest snapshot's mean decode time (Profile.Decode).
func (h *Hot) Decode() float64 {
	return float64(math.Float32frombits(uint32(h.words[wordSlots].Load())))
}

// Epoch returns the restart epoch of the latest snapshot's engine (Profile.Epoch).
func (h *Hot) Epoch() uint64 { return h.words[wordEpoch].Load() &^ learntBit }

// write stores the summary words, the scrape time (word 0) last, so that a reader that
// loads a snapshot's time first sees the rest of that snapshot or a later one. The
// caller holds the mu of the pod's podState.
func (h *Hot) write(w *[summaryWords]uint64) {
	for i := len(w) - 1; i >= 0; i-- {
		h.words[i].Store(w[i])
	}
}

// halfWord returns n as one half of a word, 0 when it does not fit.
func halfWord(n int64) uint32 {
	if n < 0 || n > math.MaxUint32 {
		return 0
	}
	return uint32(n)
}

// summaryOf lays m's summary out as the cell stores it.
func summaryOf(m *endpoint.Metrics) [summaryWords]uint64 {
	var w [summaryWords]uint64
	if !m.ScrapedAt.IsZero() {
		w[wordScrapedAt] = uint64(m.ScrapedAt.UnixNano())
	}
	w[wordUsage] = math.Float64bits(m.UsedKVCache())
	w[wordGeometry] = uint64(halfWord(int64(m.BlockSize)))<<32 | uint64(halfWord(int64(m.NumGPUBlocks)))
	q, sp := m.Queue(), m.Profile.Speed()
	q.Running, q.Waiting = float64(float32(q.Running)), float64(float32(q.Waiting)) // as Queue returns them
	rate := float32(math.NaN())
	if m.Profile.ThroughputKnown {
		rate = float32(m.Profile.Throughput)
	}
	w[wordWork] = uint64(math.Float32bits(float32(q.Running)))<<32 | uint64(math.Float32bits(rate))
	w[wordWaiting] = uint64(math.Float32bits(float32(q.Waiting)))<<32 | uint64(halfWord(q.LocalInFlight))
	w[wordBeyond] = math.Float64bits(Beyond(q))
	w[wordSlots] = uint64(math.Float32bits(float32(q.Slots)))<<32 | uint64(math.Float32bits(float32(m.Profile.Decode)))
	w[wordPrefill] = math.Float64bits(sp.PrefillPerToken)
	w[wordService] = math.Float64bits(sp.Service)
	w[wordDecode] = math.Float64bits(sp.DecodePerToken)
	w[wordEpoch] = m.Profile.Epoch &^ learntBit
	if sp.Learnt {
		w[wordEpoch] |= learntBit
	}
	return w
}

// PodSet is an immutable list of pods, sorted by key, with, index for index, their hot
// cells and in-flight counts: the form in which candidates reach routing decisions. Its
// slices MUST NOT be modified.
type PodSet struct {
	// Pods are the pods, sorted by key (see FindPod).
	Pods []*Pod
	// Hot are the pods' cells: Hot[i] is Pods[i].Hot().
	Hot []*Hot
	// Counts are the pods' in-flight counts: Counts[i] is the one Pods[i].Load() counts.
	Counts []*Count
}

// NewPodSet returns the set of pods, which it keeps if they are sorted by key and sorts
// a copy of otherwise.
func NewPodSet(pods []*Pod) PodSet {
	if !slices.IsSortedFunc(pods, comparePods) {
		pods = slices.SortedFunc(slices.Values(pods), comparePods)
	}
	return sortedPodSet(pods)
}

// sortedPodSet is NewPodSet of pods already sorted by key, such as a model's: a model is
// published once per change of any of its pods, and checking the order each time would
// make registering a large fleet quadratic in key comparisons.
func sortedPodSet(pods []*Pod) PodSet {
	hot, counts := make([]*Hot, len(pods)), make([]*Count, len(pods))
	for i, p := range pods {
		hot[i], counts[i] = p.hot, p.state.load.inFlight
	}
	return PodSet{Pods: pods, Hot: hot, Counts: counts}
}

// Len returns the number of pods.
func (s PodSet) Len() int { return len(s.Pods) }

// Filter returns the set of the pods of s that keep reports true for, in their order, so
// still sorted; s itself when keep keeps them all. keep is called once per pod.
func (s PodSet) Filter(keep func(*Pod) bool) PodSet {
	for i, p := range s.Pods {
		if keep(p) {
			continue
		}
		n := len(s.Pods) - 1
		out := PodSet{Pods: make([]*Pod, i, n), Hot: make([]*Hot, i, n), Counts: make([]*Count, i, n)}
		copy(out.Pods, s.Pods[:i])
		copy(out.Hot, s.Hot[:i])
		copy(out.Counts, s.Counts[:i])
		for j := i + 1; j < len(s.Pods); j++ {
			if keep(s.Pods[j]) {
				out.Pods, out.Hot, out.Counts = append(out.Pods, s.Pods[j]), append(out.Hot, s.Hot[j]), append(out.Counts, s.Counts[j])
			}
		}
		return out
	}
	return s
}

// FindPod returns the index of the pod with key k in pods, sorted by key as a PodSet's
// are, and whether it is there.
func FindPod(pods []*Pod, k endpoint.Key) (int, bool) {
	return slices.BinarySearchFunc(pods, k, func(p *Pod, k endpoint.Key) int { return p.Key.Compare(k) })
}

// comparePods orders pods by key.
func comparePods(a, b *Pod) int { return a.Key.Compare(b.Key) }
