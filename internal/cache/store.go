package cache

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
)

// Store is a registry of values of one kind keyed by namespace and name, such as routing
// policies or HTTPRoutes. It is safe for concurrent use: readers load the current
// immutable generation without locking, writers (the cache's reconcilers) are serialised
// by a mutex and publish a new generation on every change, or, within batch, one for all
// the changes of the batch.
//
// Stored values are shared with every reader and MUST NOT be modified; a writer stores a
// fresh value instead.
type Store[T any] struct {
	// gen is stored by writers holding mu and loaded by readers without a lock.
	gen atomic.Pointer[storeGeneration[T]]
	mu  sync.Mutex
	// draft, while a batch runs, is the items every write changes in place, published
	// when the batch ends; dirty reports whether a write changed them. Both guarded by mu.
	draft map[types.NamespacedName]T
	dirty bool
}

// storeGeneration is one immutable state of a Store.
type storeGeneration[T any] struct {
	items   map[types.NamespacedName]T
	version uint64
}

// load returns the current generation, which is empty before the first write.
func (s *Store[T]) load() *storeGeneration[T] {
	if g := s.gen.Load(); g != nil {
		return g
	}
	return &storeGeneration[T]{}
}

// Get returns the value stored under key.
func (s *Store[T]) Get(key types.NamespacedName) (T, bool) {
	v, ok := s.load().items[key]
	return v, ok
}

// List returns a fresh slice of every stored value, ordered by namespace and name.
func (s *Store[T]) List() []T {
	items := s.load().items
	keys := slices.SortedFunc(maps.Keys(items), compareNames)
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = items[k]
	}
	return out
}

// Version returns a number that changes whenever the store's content changes, so that a
// reader can rebuild something derived from the values only when they changed.
func (s *Store[T]) Version() uint64 { return s.load().version }

// set stores v under key.
func (s *Store[T]) set(key types.NamespacedName, v T) {
	s.update(func(items map[types.NamespacedName]T) bool {
		items[key] = v
		return true
	})
}

// remove deletes the value stored under key, if any.
func (s *Store[T]) remove(key types.NamespacedName) {
	s.update(func(items map[types.NamespacedName]T) bool {
		_, ok := items[key]
		delete(items, key)
		return ok
	})
}

// batch runs writes, which set and remove the store's values, and publishes their changes
// as one generation when it returns: priming a store of N values copies them once, not N
// times. Writes of other goroutines meanwhile join the batch; readers see the generation
// before it until it ends. Batches do not nest.
func (s *Store[T]) batch(writes func()) {
	s.mu.Lock()
	s.draft, s.dirty = maps.Clone(s.load().items), false
	if s.draft == nil {
		s.draft = make(map[types.NamespacedName]T)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.dirty {
			s.gen.Store(&storeGeneration[T]{items: s.draft, version: s.load().version + 1})
		}
		s.draft = nil
	}()
	writes()
}

// update applies change to a copy of the current items and publishes the copy as a new
// generation if change reports that it changed something; within a batch, it applies
// change to the batch's draft.
func (s *Store[T]) update(change func(map[types.NamespacedName]T) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draft != nil {
		s.dirty = change(s.draft) || s.dirty
		return
	}
	prev := s.load()
	items := maps.Clone(prev.items)
	if items == nil {
		items = make(map[types.NamespacedName]T)
	}
	if change(items) {
		s.gen.Store(&storeGeneration[T]{items: items, version: prev.version + 1})
	}
}

// compareNames orders names by namespace, then name.
func compareNames(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
