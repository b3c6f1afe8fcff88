// Package percore tells goroutines apart by the core they run on, for data striped by
// core: counters that each core writes a stripe of, so that requests on different cores
// write no cache line in common and no line moves between the cores' caches.
package percore

import (
	"iter"
	"sync"
	"sync/atomic"
)

// hints hand out hint numbers (*uint32), in turn. A sync.Pool keeps an object per P (a
// core running Go code), and a Get on a P takes that P's object back, so that calls on
// one core get one hint.
var hints = sync.Pool{New: func() any {
	n := next.Add(1)
	return &n
}}

// next is the last hint handed out.
var next atomic.Uint32

// hint returns the hint of the calling core: a number that calls on one core get, and
// calls on other cores most likely do not. It is only a hint: a goroutine may move to
// another core right after the call, and a hint may move to another core or be dropped
// and replaced, so that two cores share a hint for a while. Data striped by hint MUST
// stay correct when they do, and only costs time then.
func hint() uint32 {
	h := hints.Get().(*uint32)
	n := *h
	hints.Put(h)
	return n
}

// StripeCount is the number of stripes of a Stripes: enough that a few cores seldom share
// one.
const StripeCount = 8

// Stripes holds StripeCount values of T, each 128 bytes or more from the next, so that
// two stripes share no cache line (nor the pair of lines a processor may fetch
// together), however the Stripes is aligned. The zero value holds zero values of T.
type Stripes[T any] struct {
	stripes [StripeCount]struct {
		v T
		_ [128]byte
	}
}

// Local returns the stripe of the calling core (hint).
func (s *Stripes[T]) Local() *T { return &s.stripes[hint()%StripeCount].v }

// All yields every stripe, in order.
func (s *Stripes[T]) All() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for i := range s.stripes {
			if !yield(&s.stripes[i].v) {
				return
			}
		}
	}
}
