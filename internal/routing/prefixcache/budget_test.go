package prefixcache_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// heapAlloc returns the live heap after a collection.
func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// heldBytes returns what the blocks held by the first endpoints of indexes take at
// BytesPerBlock.
func heldBytes(indexes []*prefixcache.Index, endpoints int) int64 {
	var blocks int
	for _, ix := range indexes {
		for e := range endpoints {
			blocks += ix.Blocks(routingtest.Key(e))
		}
	}
	return int64(blocks) * prefixcache.BytesPerBlock
}

// TestBudgetBoundsMemory has 8 indexes of 32 endpoints each, at a bound of 65536 blocks
// per endpoint, learn concurrently 32 times what their shared 4 MiB budget holds: the
// accounted bytes stay within the budget, cover the blocks held, and the heap grows by
// about the budget, not by what was learnt.
func TestBudgetBoundsMemory(t *testing.T) {
	const (
		budgetBytes        = 4 << 20
		indexes, endpoints = 8, 32
		prompts, blocks    = 32, 256 // per index and endpoint: 32 prompts of 256 blocks
	)
	before := heapAlloc()
	budget := prefixcache.NewBudget(budgetBytes)
	ixs := make([]*prefixcache.Index, indexes)
	var wg sync.WaitGroup
	for i := range ixs {
		ixs[i] = prefixcache.NewIndex(prefixcache.DefaultMaxBlocksPerEndpoint, budget)
		wg.Go(func() {
			for p := range prompts {
				for e := range endpoints {
					ixs[i].Add(routingtest.Key(e), chain(uint64((i*prompts+p)*endpoints+e)<<20, blocks), prefixcache.Engine{})
				}
			}
		})
	}
	wg.Wait()
	learnt := int64(indexes*endpoints*prompts*blocks) * prefixcache.BytesPerBlock
	if learnt < 32*budgetBytes {
		t.Fatalf("the test learns %d bytes, want far more than the budget", learnt)
	}
	used, held := budget.Used(), heldBytes(ixs, endpoints)
	if used > budgetBytes {
		t.Errorf("budget accounts %d bytes, want at most its %d", used, budgetBytes)
	}
	if held > used || held < budgetBytes/4 {
		t.Errorf("indexes hold %d bytes of blocks, want within the %d accounted and at least a quarter of the budget", held, used)
	}
	growth := int64(heapAlloc()) - int64(before)
	t.Logf("learnt %d bytes of blocks; accounted %d, held %d, heap growth %d", learnt, used, held, growth)
	if growth > 3*budgetBytes {
		t.Errorf("heap grew by %d bytes, want about the budget of %d", growth, budgetBytes)
	}
	runtime.KeepAlive(ixs)
}

// TestBudgetEvictsIdleFirst fills a budget from an index that then goes idle and another
// that keeps learning: the idle one's blocks go first, and the active one keeps its most
// recent prompts.
func TestBudgetEvictsIdleFirst(t *testing.T) {
	const blocksInBudget = 1024
	budget := prefixcache.NewBudget(blocksInBudget * prefixcache.BytesPerBlock)
	idle := prefixcache.NewIndex(prefixcache.DefaultMaxBlocksPerEndpoint, budget)
	active := prefixcache.NewIndex(prefixcache.DefaultMaxBlocksPerEndpoint, budget)
	k := routingtest.Key(0)
	old := chain(1<<40, blocksInBudget/2)
	idle.Add(k, old, prefixcache.Engine{})
	var last []uint64
	for p := range 3 {
		last = chain(uint64(p+1)<<20, blocksInBudget/4)
		active.Add(k, last, prefixcache.Engine{})
	}
	if got := idle.Match(k, old, 0); got == len(old) {
		t.Errorf("the idle index still holds all %d blocks of its prompt, want them evicted first", got)
	}
	if got := active.Match(k, last, 0); got != len(last) {
		t.Errorf("the active index holds %d blocks of its last prompt, want all %d", got, len(last))
	}
	if used := budget.Used(); used > blocksInBudget*prefixcache.BytesPerBlock {
		t.Errorf("budget accounts %d bytes, want at most %d", used, blocksInBudget*prefixcache.BytesPerBlock)
	}
}

// TestBudgetEvictsWithinOneEndpoint gives one endpoint a budget below its own bound: it
// keeps its most recent prompt and stays within the budget.
func TestBudgetEvictsWithinOneEndpoint(t *testing.T) {
	const blocksInBudget = 1000
	budget := prefixcache.NewBudget(blocksInBudget * prefixcache.BytesPerBlock)
	ix := prefixcache.NewIndex(100*blocksInBudget, budget)
	k := routingtest.Key(0)
	var last []uint64
	for p := range 50 {
		last = chain(uint64(p+1)<<20, 100)
		ix.Add(k, last, prefixcache.Engine{})
	}
	if used := budget.Used(); used > blocksInBudget*prefixcache.BytesPerBlock {
		t.Errorf("budget accounts %d bytes, want at most %d", used, blocksInBudget*prefixcache.BytesPerBlock)
	}
	if got := ix.Match(k, last, 0); got != len(last) {
		t.Errorf("last prompt matches %d blocks, want %d", got, len(last))
	}
}

// TestBudgetReleases checks that what an index is accounted goes back to the budget
// when it forgets an endpoint, when an engine restarts and when the index is collected.
func TestBudgetReleases(t *testing.T) {
	budget := prefixcache.NewBudget(0)
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(100, budget)
	ix.Add(k, chain(1, 10), prefixcache.Engine{})
	if got, want := budget.Used(), int64(10*prefixcache.BytesPerBlock); got != want {
		t.Fatalf("after 10 blocks the budget accounts %d bytes, want %d", got, want)
	}
	ix.Add(k, chain(100, 2), prefixcache.Engine{Epoch: 1}) // the engine restarted
	if got, want := budget.Used(), int64(2*prefixcache.BytesPerBlock); got != want {
		t.Errorf("after a restart the budget accounts %d bytes, want the new epoch's %d", got, want)
	}
	ix.Forget(k)
	if got := budget.Used(); got != 0 {
		t.Errorf("after Forget the budget accounts %d bytes, want 0", got)
	}

	learn := func() { prefixcache.NewIndex(100, budget).Add(k, chain(1, 10), prefixcache.Engine{}) }
	learn()
	for deadline := time.Now().Add(10 * time.Second); budget.Used() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("a collected index is still accounted %d bytes", budget.Used())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestBudgetConcurrentForget races Forget and Add on the same endpoints: once every
// endpoint is forgotten, nothing is accounted, even to sets an Add learnt into after
// they were forgotten.
func TestBudgetConcurrentForget(t *testing.T) {
	budget := prefixcache.NewBudget(0)
	ix := prefixcache.NewIndex(1000, budget)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				k := routingtest.Key(i % 8)
				if g == 0 {
					ix.Forget(k)
					continue
				}
				ix.Add(k, chain(uint64(g*1000+i)<<16, 8), prefixcache.Engine{})
			}
		})
	}
	wg.Wait()
	for e := range 8 {
		ix.Forget(routingtest.Key(e))
	}
	if got := budget.Used(); got != 0 {
		t.Errorf("after forgetting every endpoint the budget accounts %d bytes, want 0", got)
	}
}

// TestBudgetEvictionKeepsHolders overflows a budget from two indexes: the one learnt into
// first loses its whole prompt, and with it its holding of the prompt's first block; the
// other keeps its prompt's leading blocks, first block held, and still trims by tick.
func TestBudgetEvictionKeepsHolders(t *testing.T) {
	budget := prefixcache.NewBudget(100 * prefixcache.BytesPerBlock)
	first := prefixcache.NewIndex(1000, budget)
	second := prefixcache.NewIndex(1000, budget)
	k := routingtest.Key(0)
	a, b := chain(1<<20, 100), chain(2<<20, 100)
	first.Add(k, a, prefixcache.Engine{})
	second.Add(k, b, prefixcache.Engine{})
	if got := first.Match(k, a, 0); got != 0 {
		t.Errorf("the first index matches %d blocks, want its prompt evicted", got)
	}
	if got := first.Holders(a[0], nil); len(got) != 0 {
		t.Errorf("the first index lists %v holding its evicted first block, want none", got)
	}
	held := second.Match(k, b, 0)
	if held == 0 || held == len(b) {
		t.Errorf("the second index matches %d blocks, want the leading part of its %d", held, len(b))
	}
	if got := second.Holders(b[0], nil); len(got) != 1 || got[0] != k {
		t.Errorf("the second index lists %v holding its first block, want [%v]", got, k)
	}
	if used := budget.Used(); used > 100*prefixcache.BytesPerBlock {
		t.Errorf("budget accounts %d bytes, want at most %d", used, 100*prefixcache.BytesPerBlock)
	}
	// The compacted set keeps each block's tick: trimming at the tick of its last held
	// block forgets that block only.
	ticks := second.Ticks(k, b, 0, nil)
	if n := second.Trim(k, 0, ticks[held-1]); n != 1 || second.Match(k, b, 0) != held-1 {
		t.Errorf("Trim at the last held block's tick forgot %d blocks, leaving %d, want 1 and %d", n, second.Match(k, b, 0), held-1)
	}
}
