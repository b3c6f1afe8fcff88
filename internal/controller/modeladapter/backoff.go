package modeladapter

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// retryBackoff tracks consecutive failed reconciles per ModelAdapter and answers the delay
// before the next attempt: initial, doubling up to max. It is safe for concurrent use.
type retryBackoff struct {
	initial, max time.Duration

	mu       sync.Mutex
	failures map[types.NamespacedName]int
}

// next records one more failure of key and returns the delay before retrying it.
func (b *retryBackoff) next(key types.NamespacedName) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures == nil {
		b.failures = make(map[types.NamespacedName]int)
	}
	n := b.failures[key]
	b.failures[key] = n + 1
	d := b.initial
	for range n {
		d *= 2
		if d >= b.max {
			return b.max
		}
	}
	return min(d, b.max)
}

// forget clears the failures of key.
func (b *retryBackoff) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failures, key)
}
