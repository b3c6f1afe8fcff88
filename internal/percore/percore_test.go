package percore_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/percore"
)

// TestHintsOfOneCoreRepeat checks that calls one after another, with nothing else
// running, get the same hint most of the time (a garbage collection or the race
// detector may replace it now and then).
func TestHintsOfOneCoreRepeat(t *testing.T) {
	const calls = 1000
	same, last := 0, percore.Hint()
	for range calls {
		h := percore.Hint()
		if h == last {
			same++
		}
		last = h
	}
	if same < calls/2 {
		t.Errorf("%d of %d calls got the hint of the call before, want most", same, calls)
	}
}

// BenchmarkHint measures one Hint, serially and from parallel goroutines.
func BenchmarkHint(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			percore.Hint()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				percore.Hint()
			}
		})
	})
}
