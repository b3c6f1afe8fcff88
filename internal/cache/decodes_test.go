package cache

import (
	"sync"
	"testing"
	"time"
)

// onePod returns a cache's only pod and its model.
func onePod() (*Model, *Pod) {
	c := New()
	c.UpsertPod(makePod("a").Build())
	m, _ := c.Model("llama")
	return m, m.Endpoints()[0]
}

func TestDecodeEndsFollowTheDecodes(t *testing.T) {
	const perToken, decode = 0.01, 1.0 // a request decodes for 1s, or 10 ms a token
	m, p := onePod()
	if _, rank := p.DecodeEnd(time.Now(), 1, perToken, decode); rank != 0 {
		t.Fatalf("rank %d with nothing decoding, want 0", rank)
	}
	first, second, idle := Tracker{}.Reserve(m, p, 1), Tracker{}.Reserve(m, p, 1), Tracker{}.Reserve(m, p, 1)
	first.Decoding(0)
	time.Sleep(20 * time.Millisecond)
	second.Decoding(0)
	second.Decoding(0) // counts once

	now := time.Now()
	end1, rank1 := p.DecodeEnd(now, 1, perToken, decode)
	end2, rank2 := p.DecodeEnd(now, 2, perToken, decode)
	end3, rank3 := p.DecodeEnd(now, 3, perToken, decode)
	if rank1 != 1 || rank2 != 2 || rank3 != 2 {
		t.Fatalf("ranks %d, %d, %d for k = 1, 2, 3, want 1, 2, 2: two decode", rank1, rank2, rank3)
	}
	if !(end1 > 0 && end1+20*time.Millisecond <= end2 && end2 <= time.Second && end3 == end2) {
		t.Fatalf("ends in %v, %v, %v, want the first decode's 20ms or more before the second's, within 1s, and k = 3 the last's", end1, end2, end3)
	}
	if late, _ := p.DecodeEnd(now.Add(time.Hour), 1, perToken, decode); late != 0 {
		t.Errorf("a decode past its expected end ends in %v, want 0", late)
	}

	// A request of 5 tokens at most ends within 50 ms: first, though it began last.
	short := Tracker{}.Reserve(m, p, 1)
	short.Decoding(5)
	if end, rank := p.DecodeEnd(time.Now(), 1, perToken, decode); rank != 1 || end > 50*time.Millisecond {
		t.Errorf("with a 5-token request decoding: the first end in %v, rank %d, want within 50ms", end, rank)
	}
	short.Release(0)

	first.Release(0)
	idle.Release(0)
	if end, rank := p.DecodeEnd(now, 1, perToken, decode); rank != 1 || end != end2 {
		t.Errorf("after the first decode's release: %v, rank %d, want the second's %v, rank 1", end, rank, end2)
	}
	second.Release(0)
	second.Decoding(0) // released: counts no more
	if _, rank := p.DecodeEnd(now, 1, perToken, decode); rank != 0 {
		t.Errorf("rank %d once every decode was released, want 0", rank)
	}
}

// TestDecodesUnderChurn begins and releases decodes from many goroutines at once, some
// released before they began, and checks that none is left listed.
func TestDecodesUnderChurn(t *testing.T) {
	m, p := onePod()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				r := Tracker{}.Reserve(m, p, 1)
				var both sync.WaitGroup
				both.Go(func() { r.Decoding(int64(i % 3)) })
				if (g+i)%2 == 0 {
					both.Go(func() { r.Release(0) })
				} else {
					p.DecodeEnd(time.Now(), 1+i%4, 0.01, 1)
				}
				both.Wait()
				r.Release(0)
			}
		})
	}
	wg.Wait()
	if _, rank := p.DecodeEnd(time.Now(), 1, 0.01, 1); rank != 0 || len(p.state.decodes.list) != 0 {
		t.Errorf("%d decodes left listed once every request was released", len(p.state.decodes.list))
	}
	if n := p.Load().InFlight(); n != 0 {
		t.Errorf("%d in flight after every release", n)
	}
}
