package cache

import (
	"math"
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
	if got := p.Hot().Summary(); got != (endpoint.Summary{}) {
		t.Fatalf("summary before any scrape = %+v, want zero", got)
	}
	m := endpoint.Metrics{
		ScrapedAt: time.Unix(1700000000, 5), KVCacheUsage: 0.25, BlockSize: 16, NumGPUBlocks: 4096,
		Running: 3, Waiting: 2, LocalInFlight: 4,
		Profile: endpoint.Profile{Epoch: 2, Slots: 8, PrefillPerToken: 1e-4, Service: 1.5, DecodePerToken: 0.02,
			PrefilledTokens: 1e6, Requests: 100},
	}
	for _, m := range []endpoint.Metrics{m, {ScrapedAt: time.Unix(1700000001, 0), KVCacheUsage: math.NaN()}} {
		if !c.SetMetrics(p, m) {
			t.Fatal("SetMetrics discarded a scrape of the current address")
		}
		want := m.Summary()
		if got := p.Hot().Summary(); got != want {
			t.Errorf("summary = %+v, want %+v", got, want)
		}
		kv := p.Hot().KV()
		if kv != (KV{want.ScrapedAt, want.KVCacheUsage, want.BlockSize, want.NumGPUBlocks}) {
			t.Errorf("KV = %+v, want the summary's %+v", kv, want)
		}
	}
	if got := p.Hot().Summary(); got.KVCacheUsage != 0 {
		t.Errorf("a NaN usage is summarised as %v, want 0", got.KVCacheUsage)
	}
}

// TestHotCellsKeepToTheirCacheLines checks the layout decisions read: a cell is two cache
// lines, and the cells of a slab start on line boundaries.
func TestHotCellsKeepToTheirCacheLines(t *testing.T) {
	if size := unsafe.Sizeof(Hot{}); size != 128 {
		t.Errorf("a Hot is %d bytes, want 128 (two cache lines)", size)
	}
	var a hotAllocator
	for i := range 2 * hotSlab {
		if addr := uintptr(unsafe.Pointer(a.next())); addr%64 != 0 {
			t.Fatalf("cell %d at %#x, not on a cache line", i, addr)
		}
	}
}

// TestHotReadersRaceAStore reads a cell's summary while it is stored and reset; under
// -race it checks that readers need no lock, and each read sees a stored scrape time.
func TestHotReadersRaceAStore(t *testing.T) {
	st := &podState{hot: new(Hot)}
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
				if at := st.hot.Summary().ScrapedAt; at != 0 && at%1000 != 0 {
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
