package cache

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// TestHotSummaryIsTheLatestSnapshots checks that a pod's hot cell summarises exactly the
// metrics last stored, for every field a decision reads.
func TestHotSummaryIsTheLatestSnapshots(t *testing.T) {
	c := New()
	c.UpsertPod(makePod("a").Build())
	p, _ := c.Pod(makePod("a").Build().Key)
	h := p.Hot()
	if at, usage := h.Usage(); at != 0 || usage != 0 {
		t.Fatalf("Usage() before any scrape = %d, %v; want zero", at, usage)
	}
	if bs, nb := h.Geometry(); bs != 0 || nb != 0 {
		t.Fatalf("Geometry() before any scrape = %d, %d; want zero", bs, nb)
	}
	if h.Queue() != (endpoint.Queue{}) || h.Speed() != (endpoint.Speed{}) || h.Epoch() != 0 ||
		h.Backlog() != (Backlog{}) || h.Throughput() != (Throughput{}) {
		t.Fatalf("summary before any scrape: %+v %+v %d %+v %+v, want zero", h.Queue(), h.Speed(), h.Epoch(), h.Backlog(), h.Throughput())
	}
	learnt := endpoint.Metrics{
		ScrapedAt: time.Unix(1700000000, 5), KVCacheUsage: 0.25, BlockSize: 16, NumGPUBlocks: 4096,
		Running: 3, Waiting: 2, LocalInFlight: 4,
		Profile: endpoint.Profile{Epoch: 2, Slots: 8, PrefillPerToken: 1e-4, Service: 1.5, DecodePerToken: 0.02,
			PrefilledTokens: 1e6, Requests: 100, Throughput: 1234.5, ThroughputKnown: true},
	}
	if !learnt.Profile.Learnt() {
		t.Fatal("the test's learnt profile is not learnt")
	}
	// This process's requests outnumber what the engine held: none beyond them.
	outnumbered := endpoint.Metrics{ScrapedAt: time.Unix(1700000001, 0), KVCacheUsage: math.NaN(), Running: 2, LocalInFlight: 5}
	for _, tt := range []struct {
		m      endpoint.Metrics
		beyond float64
	}{{learnt, 1}, {outnumbered, 0}} {
		if !c.SetMetrics(p, tt.m) {
			t.Fatal("SetMetrics discarded a scrape of the current address")
		}
		sp := tt.m.Profile.Speed()
		want := Backlog{Beyond: tt.beyond, Slots: tt.m.Profile.Slots, PrefillPerToken: sp.PrefillPerToken, Learnt: sp.Learnt}
		if got := h.Backlog(); got != want {
			t.Errorf("Backlog() = %+v, want %+v", got, want)
		}
	}
	for _, m := range []endpoint.Metrics{learnt, outnumbered} {
		if !c.SetMetrics(p, m) {
			t.Fatal("SetMetrics discarded a scrape of the current address")
		}
		if at, usage := h.Usage(); at != m.ScrapedAt.UnixNano() || usage != m.UsedKVCache() {
			t.Errorf("Usage() = %d, %v; want %d, %v", at, usage, m.ScrapedAt.UnixNano(), m.UsedKVCache())
		}
		if got := h.PeekUsage(); got != m.UsedKVCache() {
			t.Errorf("PeekUsage() = %v, want %v", got, m.UsedKVCache())
		}
		if bs, nb := h.Geometry(); bs != int64(m.BlockSize) || nb != int64(m.NumGPUBlocks) {
			t.Errorf("Geometry() = %d, %d; want %d, %d", bs, nb, m.BlockSize, m.NumGPUBlocks)
		}
		if got, want := h.Queue(), m.Queue(); got != want {
			t.Errorf("Queue() = %+v, want %+v", got, want)
		}
		if got, want := h.Speed(), m.Profile.Speed(); got != want {
			t.Errorf("Speed() = %+v, want %+v", got, want)
		}
		if got := h.Epoch(); got != m.Profile.Epoch {
			t.Errorf("Epoch() = %d, want %d", got, m.Profile.Epoch)
		}
		wantThroughput := Throughput{ScrapedAt: m.ScrapedAt.UnixNano(), Running: m.Running, Known: m.Profile.ThroughputKnown}
		got := h.Throughput()
		if wantThroughput.Known {
			wantThroughput.TokensPerSecond = m.Profile.Throughput
		} else {
			got.TokensPerSecond = 0 // meaningless when not known
		}
		if got != wantThroughput {
			t.Errorf("Throughput() = %+v, want %+v", got, wantThroughput)
		}
	}
	if _, got := h.Usage(); got != 0 {
		t.Errorf("a NaN usage is summarised as %v, want 0", got)
	}
}

// TestHotCellsKeepToTheirCacheLines checks the layout decisions read: a slab stores its
// cells word by word, each row on a cache line boundary, the cells of pods added one
// after another side by side in it; and every word of every cell is its own.
func TestHotCellsKeepToTheirCacheLines(t *testing.T) {
	var a hotAllocator
	cells := make([]*Hot, 3*hotSlab)
	for i := range cells {
		cells[i] = a.next()
		if i%hotSlab == 0 {
			for w := range summaryWords {
				if addr := uintptr(unsafe.Pointer(&cells[i].words[w])); addr%64 != 0 {
					t.Fatalf("row %d of slab %d at %#x, not on a cache line", w, i/hotSlab, addr)
				}
			}
			continue
		}
		if got, want := uintptr(unsafe.Pointer(cells[i])), uintptr(unsafe.Pointer(cells[i-1]))+8; got != want {
			t.Fatalf("cell %d at %#x, want %#x: the word after cell %d's", i, got, want, i-1)
		}
	}
	for i, h := range cells {
		var w [summaryWords]uint64
		for j := range w {
			w[j] = uint64(i*summaryWords + j + 1)
		}
		h.write(&w)
	}
	for i, h := range cells {
		for j := range summaryWords {
			if got, want := h.words[j].Load(), uint64(i*summaryWords+j+1); got != want {
				t.Fatalf("word %d of cell %d is %d, want %d: cells share words", j, i, got, want)
			}
		}
	}
}

// TestPodStatesKeepToTheirCacheLines checks that the counters reservations write are a
// cache line of their own in every pod's state, apart from what scrapes write, from the
// decodes streamed answers write and from the pods added before and after.
func TestPodStatesKeepToTheirCacheLines(t *testing.T) {
	var st podState
	if size, second, third := unsafe.Sizeof(st), unsafe.Offsetof(st.id), unsafe.Offsetof(st.decodes); size != 192 || second != 64 || third != 128 {
		t.Errorf("a podState is %d bytes with its scrape line at %d and its decodes at %d, want 192, 64 and 128", size, second, third)
	}
	c := New()
	for i := range 64 {
		c.UpsertPod(makePod(fmt.Sprintf("p%02d", i)).Build())
	}
	m, _ := c.Model("llama")
	for _, p := range m.PodSet().Pods {
		if addr := uintptr(unsafe.Pointer(p.state)); addr%64 != 0 {
			t.Fatalf("%s's state at %#x, not on a cache line", p.Key.Name, addr)
		}
	}
}

// TestCountsAreDense checks the layout least-request and round-robin read: the in-flight
// counts of countSlab pods added one after another fill one 4 KiB block, eight to a cache
// line, with any two pods added in turn on different lines; and a model's set lists each
// pod's own count.
func TestCountsAreDense(t *testing.T) {
	c := New()
	const pods = countSlab
	for i := range pods {
		c.UpsertPod(makePod(fmt.Sprintf("p%03d", i)).Build())
	}
	m, _ := c.Model("llama")
	set := m.PodSet()
	base := uintptr(unsafe.Pointer(set.Counts[0]))
	for _, cnt := range set.Counts {
		base = min(base, uintptr(unsafe.Pointer(cnt)))
	}
	offset := func(i int) uintptr { return uintptr(unsafe.Pointer(set.Counts[i])) - base }
	seen := map[uintptr]bool{}
	for i := range set.Counts {
		at := offset(i)
		if at >= countSlab*unsafe.Sizeof(Count{}) || seen[at] {
			t.Fatalf("count %d at offset %d of the block, or twice", i, at)
		}
		seen[at] = true
		if i > 0 && offset(i-1)/64 == at/64 {
			t.Fatalf("counts %d and %d share a cache line", i-1, i)
		}
	}
	for i, p := range set.Pods {
		Tracker{}.Reserve(m, p, 1)
		if set.Counts[i].Value() != 1 {
			t.Fatalf("a reservation on %s counted %d on its set's count", p.Key.Name, set.Counts[i].Value())
		}
	}
}

// TestHotReadersRaceAStore reads a cell's summary while it is stored and reset; under
// -race it checks that readers need no lock, and each read sees a stored scrape time.
func TestHotReadersRaceAStore(t *testing.T) {
	var a hotAllocator
	st := &podState{hot: a.next()}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if at := st.hot.ScrapedAt(); at != 0 && at%1000 != 0 {
					t.Errorf("read scrape time %d, never stored", at)
					return
				}
			}
		})
	}
	gen := st.gen
	for i := range 2000 {
		if i%100 == 99 {
			gen = st.reset()
		}
		st.store(gen, &endpoint.Metrics{ScrapedAt: time.Unix(0, int64(i+1)*1000), Running: float64(i)})
	}
	close(stop)
	wg.Wait()
}

// TestPodSetFilter checks that Filter keeps the chosen pods in their order with their
// cells, asks of each pod once, and returns the set itself when it keeps every pod.
func TestPodSetFilter(t *testing.T) {
	c := New()
	for _, name := range []string{"a", "b", "c", "d"} {
		c.UpsertPod(makePod(name).Build())
	}
	m, _ := c.Model("llama")
	all := m.PodSet()
	for i, p := range all.Pods {
		for range i + 1 {
			Tracker{}.Reserve(m, p, 1)
		}
	}
	asked := map[string]int{}
	got := all.Filter(func(p *Pod) bool { asked[p.Key.Name]++; return p.Key.Name != "b" && p.Key.Name != "d" })
	var names []string
	for i, p := range got.Pods {
		names = append(names, p.Key.Name)
		if got.Hot[i] != p.Hot() {
			t.Errorf("Filter's cell %d is not pod %s's", i, p.Key.Name)
		}
		if n, want := got.Counts[i].Value(), p.Load().InFlight(); n != want || n == 0 {
			t.Errorf("Filter's count %d reads %d, pod %s has %d in flight", i, n, p.Key.Name, want)
		}
	}
	if !slices.Equal(names, []string{"a", "c"}) || len(got.Hot) != 2 || len(got.Counts) != 2 {
		t.Errorf("Filter kept %v (%d cells, %d counts), want [a c]", names, len(got.Hot), len(got.Counts))
	}
	if len(asked) != 4 || asked["a"] != 1 || asked["b"] != 1 || asked["c"] != 1 || asked["d"] != 1 {
		t.Errorf("Filter asked %v, want each pod once", asked)
	}
	if kept := all.Filter(func(*Pod) bool { return true }); &kept.Pods[0] != &all.Pods[0] {
		t.Error("Filter keeping every pod copied the set")
	}
	if all.Len() != 4 {
		t.Errorf("Filter changed its input: %d pods", all.Len())
	}
}
