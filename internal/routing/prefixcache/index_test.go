package prefixcache_test

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// chain returns n distinct fake block hashes starting at first.
func chain(first uint64, n int) []uint64 {
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = first + uint64(i)
	}
	return hashes
}

func TestIndexMatch(t *testing.T) {
	a, b := routingtest.Key(0), routingtest.Key(1)
	ix := prefixcache.NewIndex(100, nil)
	ix.Add(a, []uint64{1, 2, 3}, prefixcache.Engine{})
	ix.Add(a, []uint64{1, 2, 7, 8}, prefixcache.Engine{})
	ix.Add(b, []uint64{5, 6}, prefixcache.Engine{})

	tests := []struct {
		name   string
		hashes []uint64
		wantA  int
		wantB  int
	}{
		{name: "empty", hashes: nil, wantA: 0, wantB: 0},
		{name: "whole prompt held", hashes: []uint64{1, 2, 3}, wantA: 3, wantB: 0},
		{name: "prefix held, then a miss", hashes: []uint64{1, 2, 3, 4}, wantA: 3, wantB: 0},
		{name: "branching prompt", hashes: []uint64{1, 2, 7, 8, 9}, wantA: 4, wantB: 0},
		{name: "stops at the first miss", hashes: []uint64{1, 9, 3}, wantA: 1, wantB: 0},
		{name: "first block missing", hashes: []uint64{9, 2, 3}, wantA: 0, wantB: 0},
		{name: "another endpoint's prompt", hashes: []uint64{5, 6, 1}, wantA: 0, wantB: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ix.Match(a, tt.hashes, 0); got != tt.wantA {
				t.Errorf("Match(a) = %d, want %d", got, tt.wantA)
			}
			if got := ix.Match(b, tt.hashes, 0); got != tt.wantB {
				t.Errorf("Match(b) = %d, want %d", got, tt.wantB)
			}
			if got := ix.Match(routingtest.Key(2), tt.hashes, 0); got != 0 {
				t.Errorf("Match(unknown) = %d, want 0", got)
			}
		})
	}

	ix.Forget(a)
	if got := ix.Match(a, []uint64{1}, 0); got != 0 || ix.Blocks(a) != 0 {
		t.Errorf("after Forget: Match = %d, Blocks = %d, want 0, 0", got, ix.Blocks(a))
	}
	if got := ix.Match(b, []uint64{5}, 0); got != 1 {
		t.Errorf("Forget(a) changed b: Match = %d, want 1", got)
	}
}

func TestIndexBoundedLRU(t *testing.T) {
	const bound = 10
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(bound, nil)

	old := chain(100, 6)
	ix.Add(k, old, prefixcache.Engine{})
	ix.Add(k, chain(200, 6), prefixcache.Engine{}) // 12 hashes offered: the last 2 of the old prompt go
	if got := ix.Blocks(k); got != bound {
		t.Fatalf("Blocks = %d, want the bound %d", got, bound)
	}
	if got := ix.Match(k, old, 0); got != 4 {
		t.Errorf("old prompt matches %d blocks, want its first 4 (its tail is evicted first)", got)
	}
	if got := ix.Match(k, chain(200, 6), 0); got != 6 {
		t.Errorf("new prompt matches %d blocks, want 6", got)
	}

	// Re-adding refreshes recency: the old prefix survives the next insertion.
	ix.Add(k, old[:2], prefixcache.Engine{})
	ix.Add(k, chain(300, 4), prefixcache.Engine{})
	if got := ix.Match(k, old, 0); got != 2 {
		t.Errorf("refreshed old prefix matches %d blocks, want 2", got)
	}
	if got := ix.Blocks(k); got != bound {
		t.Errorf("Blocks = %d, want the bound %d", got, bound)
	}

	// A prompt longer than the bound keeps its leading blocks.
	long := chain(1000, 3*bound)
	ix.Add(k, long, prefixcache.Engine{})
	if got := ix.Match(k, long, 0); got != bound {
		t.Errorf("over-long prompt matches %d blocks, want its first %d", got, bound)
	}
}

func TestIndexBoundOfOne(t *testing.T) {
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(1, nil)
	for h := range uint64(5) {
		ix.Add(k, []uint64{h}, prefixcache.Engine{})
		if ix.Blocks(k) != 1 || ix.Match(k, []uint64{h}, 0) != 1 {
			t.Fatalf("after adding %d: Blocks = %d, Match = %d, want 1, 1", h, ix.Blocks(k), ix.Match(k, []uint64{h}, 0))
		}
	}
}

func TestNewIndexRejectsBadBound(t *testing.T) {
	for _, bound := range []int{0, -1, 1 << 31} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("NewIndex(%d, nil) did not panic", bound)
				}
			}()
			prefixcache.NewIndex(bound, nil)
		})
	}
}

// TestIndexConcurrentUse exercises Add, Match, Blocks and Forget from many goroutines;
// run with -race. Each endpoint's set must stay within its bound.
func TestIndexConcurrentUse(t *testing.T) {
	const bound, endpoints = 64, 4
	ix := prefixcache.NewIndex(bound, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := routingtest.Key((g + i) % endpoints)
				hashes := chain(uint64(i%10)*100, 20)
				switch i % 4 {
				case 0, 1:
					ix.Add(k, hashes, prefixcache.Engine{})
				case 2:
					if n := ix.Match(k, hashes, 0); n < 0 || n > len(hashes) {
						t.Errorf("Match = %d out of [0, %d]", n, len(hashes))
					}
				case 3:
					if g == 0 {
						ix.Forget(k)
					}
					if n := ix.Blocks(k); n > bound {
						t.Errorf("Blocks = %d beyond the bound %d", n, bound)
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestIndexEpochs(t *testing.T) {
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(100, nil)
	ix.Add(k, chain(10, 4), prefixcache.Engine{Epoch: 0})
	if got := ix.Match(k, chain(10, 4), 1); got != 0 {
		t.Errorf("Match in the next epoch = %d, want 0: the engine restarted with an empty cache", got)
	}
	if got := ix.Match(k, chain(10, 4), 0); got != 4 {
		t.Errorf("Match in the same epoch = %d, want 4", got)
	}
	ix.Add(k, chain(20, 3), prefixcache.Engine{Epoch: 1})
	if got := ix.Blocks(k); got != 3 {
		t.Errorf("Blocks after an Add in the next epoch = %d, want 3: the old epoch's are cleared", got)
	}
}

func TestIndexEngineBound(t *testing.T) {
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(100, nil)
	ix.Add(k, chain(10, 8), prefixcache.Engine{})
	ix.Add(k, chain(20, 2), prefixcache.Engine{MaxBlocks: 6})
	if got := ix.Blocks(k); got != 6 {
		t.Errorf("Blocks = %d, want the engine's bound 6", got)
	}
	if got := ix.Match(k, chain(20, 2), 0); got != 2 {
		t.Errorf("Match of the newest prompt = %d, want 2", got)
	}
	if got := ix.Match(k, chain(10, 8), 0); got != 4 {
		t.Errorf("Match of the older prompt = %d, want its 4 leading blocks", got)
	}
}

// TestIndexKeepsTheTicksOfARepeatedPrompt adds the prompt a set was last sent again
// within the retouch interval, which changes nothing, and after another prompt, which
// moves its ticks on.
func TestIndexKeepsTheTicksOfARepeatedPrompt(t *testing.T) {
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(100, nil)
	ix.SetRetouchEvery(time.Hour)
	hot, other := chain(10, 4), chain(20, 4)
	ix.Add(k, hot, prefixcache.Engine{})
	first := ix.Ticks(k, hot, 0, nil)
	if floor := ix.Add(k, hot, prefixcache.Engine{}); floor != first[len(first)-1] {
		t.Errorf("a repeated Add returned %d, want the lowest tick its blocks kept, %d", floor, first[len(first)-1])
	}
	if again := ix.Ticks(k, hot, 0, nil); !slices.Equal(again, first) {
		t.Errorf("ticks after a repeated Add = %v, want unchanged %v", again, first)
	}
	ix.Add(k, other, prefixcache.Engine{})
	if floor := ix.Add(k, hot, prefixcache.Engine{}); floor <= first[0] {
		t.Errorf("an Add after another prompt returned %d, want a tick past the earlier ones, above %d", floor, first[0])
	}
	if moved := ix.Ticks(k, hot, 0, nil); moved[0] <= first[0] {
		t.Errorf("ticks after another prompt and the hot one = %v, want past %v", moved, first)
	}
	if got := ix.Match(k, other, 0); got != 4 {
		t.Errorf("Match(other) = %d, want 4", got)
	}
	ix.Add(k, hot, prefixcache.Engine{Epoch: 1})
	if got := ix.Match(k, hot, 1); got != 4 {
		t.Errorf("Match in the new epoch = %d, want 4: a repeated prompt of another epoch is learnt", got)
	}
}

// TestIndexReadsAHotPromptAsTheSetHoldsIt checks what Match, Ticks and Add read of a
// prompt sent again, which the set publishes for reading without a lock: only in the
// set's epoch, only within the retouch interval, and only within the engine's bound.
func TestIndexReadsAHotPromptAsTheSetHoldsIt(t *testing.T) {
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(100, nil)
	ix.SetRetouchEvery(time.Hour)
	hot := chain(10, 8)
	ix.Add(k, hot, prefixcache.Engine{Epoch: 3})
	ix.Add(k, hot, prefixcache.Engine{Epoch: 3}) // sent again: published
	if got := ix.Match(k, hot, 3); got != 8 {
		t.Errorf("Match in the set's epoch = %d, want 8", got)
	}
	if got, ticks := ix.Match(k, hot, 2), ix.Ticks(k, hot, 2, nil); got != 0 || len(ticks) != 0 {
		t.Errorf("in another epoch, Match = %d and Ticks = %v, want 0 and none", got, ticks)
	}
	ix.Add(k, hot, prefixcache.Engine{Epoch: 3, MaxBlocks: 5}) // an engine now smaller
	if got := ix.Blocks(k); got != 5 {
		t.Errorf("after an Add within 5 blocks, the set holds %d, want 5", got)
	}

	ix.Add(k, hot, prefixcache.Engine{Epoch: 3})
	ix.Add(k, hot, prefixcache.Engine{Epoch: 3}) // published again
	before := ix.Ticks(k, hot, 3, nil)
	ix.SetRetouchEvery(time.Nanosecond) // the mark's last touch is now past the interval
	ix.Add(k, hot, prefixcache.Engine{Epoch: 3})
	if after := ix.Ticks(k, hot, 3, nil); after[0] <= before[0] {
		t.Errorf("ticks after an Add past the retouch interval = %v, want past %v", after, before)
	}
}

func TestIndexTrim(t *testing.T) {
	k := routingtest.Key(0)
	ix := prefixcache.NewIndex(100, nil)
	old, mid, recent := chain(10, 3), chain(20, 3), chain(30, 3)
	ix.Add(k, old, prefixcache.Engine{})
	ix.Add(k, mid, prefixcache.Engine{})
	ix.Add(k, recent, prefixcache.Engine{})
	ticks := ix.Ticks(k, mid, 0, nil)
	if len(ticks) != 3 || !(ticks[0] > ticks[1] && ticks[1] > ticks[2]) {
		t.Fatalf("Ticks = %v, want 3 falling ticks: a prompt's first block is its most recent", ticks)
	}
	if n := ix.Trim(k, 0, ticks[1]); n != 5 {
		t.Errorf("Trim dropped %d hashes, want the 3 older ones and 2 of mid", n)
	}
	if got := ix.Match(k, old, 0); got != 0 {
		t.Errorf("Match(old) = %d after Trim, want 0", got)
	}
	if got := ix.Match(k, mid, 0); got != 1 {
		t.Errorf("Match(mid) = %d after Trim, want 1 (its first block was touched last)", got)
	}
	if got := ix.Match(k, recent, 0); got != 3 {
		t.Errorf("Match(recent) = %d after Trim, want 3", got)
	}
	if n := ix.Trim(k, 1, ^uint64(0)); n != 0 {
		t.Errorf("Trim in another epoch dropped %d hashes, want 0", n)
	}
	// Freed nodes are reused: the set fills to its bound again.
	ix.Add(k, chain(100, 96), prefixcache.Engine{})
	if got := ix.Blocks(k); got != 100 {
		t.Errorf("Blocks = %d after refilling, want 100", got)
	}
}

// TestIndexHoldersFollowTheSets checks that Holders lists exactly the endpoints whose
// sets hold a first block, through adds, evictions, trims, restarts and Forget.
func TestIndexHoldersFollowTheSets(t *testing.T) {
	a, b := routingtest.Key(0), routingtest.Key(1)
	ix := prefixcache.NewIndex(4, nil)
	holders := func(first uint64) []string {
		var out []string
		for _, k := range ix.Holders(first, nil) {
			out = append(out, k.Name)
		}
		slices.Sort(out)
		return out
	}
	check := func(step string, first uint64, want ...string) {
		t.Helper()
		if got := holders(first); !slices.Equal(got, want) {
			t.Errorf("%s: Holders(%d) = %v, want %v", step, first, got, want)
		}
	}
	ix.Add(a, []uint64{1, 2, 3}, prefixcache.Engine{})
	ix.Add(b, []uint64{1, 2}, prefixcache.Engine{})
	check("both hold prompt 1", 1, a.Name, b.Name)
	check("a block that is no prompt's first", 2)

	ix.Add(a, []uint64{10, 11, 12, 13}, prefixcache.Engine{}) // a's bound of 4 evicts 3, 2 and 1
	check("a evicted prompt 1", 1, b.Name)
	check("a holds prompt 10", 10, a.Name)

	ix.Add(b, []uint64{1, 2}, prefixcache.Engine{Epoch: 1}) // b's engine restarted
	check("b's new epoch holds prompt 1 again", 1, b.Name)
	ix.Add(b, []uint64{20}, prefixcache.Engine{Epoch: 2})
	check("b's next epoch dropped prompt 1", 1)

	ix.Trim(a, 0, 1<<40) // a's engine evicted everything
	check("a trimmed", 10)

	ix.Add(a, []uint64{30}, prefixcache.Engine{})
	ix.Forget(a)
	check("a forgotten", 30)
	ix.Add(a, []uint64{30}, prefixcache.Engine{})
	check("a learns again after Forget", 30, a.Name)
}

// lruModel is the plain reference of one endpoint's set of an Index: each hash's tick of
// its last touch, the least recent evicted first.
type lruModel struct {
	bound int
	tick  uint64
	ticks map[uint64]uint64
}

func (m *lruModel) add(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		m.tick++
		if _, ok := m.ticks[hashes[i]]; !ok && len(m.ticks) >= m.bound {
			oldest := uint64(0)
			for h, t := range m.ticks {
				if oldest == 0 || t < m.ticks[oldest] {
					oldest = h
				}
			}
			delete(m.ticks, oldest)
		}
		m.ticks[hashes[i]] = m.tick
	}
}

// mostRecent reports whether hashes are the most recently touched hashes, in order of
// recency: an add of them would change nothing but their ticks.
func (m *lruModel) mostRecent(hashes []uint64) bool {
	recent := slices.SortedFunc(maps.Keys(m.ticks), func(a, b uint64) int { return cmp.Compare(m.ticks[b], m.ticks[a]) })
	return len(hashes) <= len(recent) && slices.Equal(hashes, recent[:len(hashes)])
}

func (m *lruModel) leading(hashes []uint64) []uint64 {
	var ticks []uint64
	for _, h := range hashes {
		t, ok := m.ticks[h]
		if !ok {
			break
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func (m *lruModel) trim(tick uint64) {
	for h, t := range m.ticks {
		if t <= tick {
			delete(m.ticks, h)
		}
	}
}

// TestIndexAgreesWithAModel checks Add, Match, Ticks and Trim against the reference
// over random sequences of prompts sharing prefixes, the same prompt often twice in a
// row (which Add retouches in place) or after another. With a retouch interval, an Add of
// the set's most recent hashes, in order, changes nothing and publishes the set's mark,
// which Match, Ticks and further such Adds then read without a lock: the reference
// leaves its ticks, and every change to the set must withdraw the mark.
func TestIndexAgreesWithAModel(t *testing.T) {
	for _, every := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("retouch every %v", every), func(t *testing.T) {
			agreeWithAModel(t, every)
		})
	}
}

func agreeWithAModel(t *testing.T, every time.Duration) {
	rnd := rand.New(rand.NewPCG(5, 8))
	prompts := [][]uint64{chain(1, 6), chain(1, 9), chain(1, 3), chain(50, 5), chain(2, 4), chain(50, 12)}
	k := routingtest.Key(0)
	for iter := range 200 {
		bound := 4 + rnd.IntN(20)
		ix := prefixcache.NewIndex(bound, nil)
		ix.SetRetouchEvery(every)
		model := &lruModel{bound: bound, ticks: map[uint64]uint64{}}
		var last []uint64
		for step := range 40 {
			p := prompts[rnd.IntN(len(prompts))]
			if last != nil && rnd.IntN(2) == 0 {
				p = last
			}
			switch rnd.IntN(8) {
			case 0:
				if ticks := model.leading(p); len(ticks) > 0 {
					at := ticks[rnd.IntN(len(ticks))]
					ix.Trim(k, 0, at)
					model.trim(at)
				}
			default:
				ix.Add(k, p, prefixcache.Engine{})
				if every == 0 || !model.mostRecent(p) {
					model.add(p)
				}
				last = p
			}
			for _, q := range prompts {
				want := model.leading(q)
				if got := ix.Ticks(k, q, 0, nil); !slices.Equal(got, want) {
					t.Fatalf("iteration %d, step %d: Ticks(%v) = %v, want %v", iter, step, q, got, want)
				}
				if got := ix.Match(k, q, 0); got != len(want) {
					t.Fatalf("iteration %d, step %d: Match(%v) = %d, want %d", iter, step, q, got, len(want))
				}
			}
			if got := ix.Blocks(k); got != len(model.ticks) {
				t.Fatalf("iteration %d, step %d: Blocks = %d, want %d", iter, step, got, len(model.ticks))
			}
		}
	}
}
