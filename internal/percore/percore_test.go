package percore

import (
	"slices"
	"testing"
	"unsafe"
)

// TestHintsOfOneCoreRepeat checks that calls one after another, with nothing else
// running, get the same hint most of the time (a garbage collection or the race
// detector may replace it now and then).
func TestHintsOfOneCoreRepeat(t *testing.T) {
	const calls = 1000
	same, last := 0, hint()
	for range calls {
		h := hint()
		if h == last {
			same++
		}
		last = h
	}
	if same < calls/2 {
		t.Errorf("%d of %d calls got the hint of the call before, want most", same, calls)
	}
}

// BenchmarkHint measures one hint, serially and from parallel goroutines.
func BenchmarkHint(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			hint()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				hint()
			}
		})
	})
}

// TestStripesShareNoCacheLine checks that All yields StripeCount stripes, each 128 bytes
// or more from the next, and that Local returns one of them.
func TestStripesShareNoCacheLine(t *testing.T) {
	var s Stripes[[3]uint64]
	var addrs []uintptr
	for p := range s.All() {
		addrs = append(addrs, uintptr(unsafe.Pointer(p)))
	}
	if len(addrs) != StripeCount {
		t.Fatalf("All yielded %d stripes, want %d", len(addrs), StripeCount)
	}
	for i := 1; i < len(addrs); i++ {
		if gap := addrs[i] - addrs[i-1] - unsafe.Sizeof([3]uint64{}); gap < 128 {
			t.Errorf("stripes %d and %d are %d bytes apart, want 128 or more", i-1, i, gap)
		}
	}
	if local := uintptr(unsafe.Pointer(s.Local())); !slices.Contains(addrs, local) {
		t.Errorf("Local returned %#x, none of the stripes", local)
	}
}
