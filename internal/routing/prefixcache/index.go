package prefixcache

import (
	"sync"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Index remembers, for each endpoint, a bounded set of the prompt block hashes recently
// routed to it, forgetting the least recently added hashes first. Create it with
// NewIndex; it is safe for concurrent use.
//
// Synchronisation model: the endpoint table is a sync.Map, whose lookups take no lock;
// entries are added by the first Add for an endpoint and removed by Forget. Each
// endpoint's set has its own RWMutex: Add holds it for writing while it inserts one
// prompt's hashes, Match holds it for reading while it scans one prompt's hashes. No
// lock is held across endpoints, so scoring many endpoints never blocks on a global
// lock, and Adds to different endpoints never contend.
type Index struct {
	maxBlocks int
	endpoints sync.Map // endpoint.Key → *blockLRU
}

// NewIndex returns an empty index that keeps at most maxBlocksPerEndpoint hashes per
// endpoint. It panics if maxBlocksPerEndpoint is not in [1, 1<<31).
func NewIndex(maxBlocksPerEndpoint int) *Index {
	if maxBlocksPerEndpoint < 1 || maxBlocksPerEndpoint >= 1<<31 {
		panic("prefixcache: maxBlocksPerEndpoint out of range")
	}
	return &Index{maxBlocks: maxBlocksPerEndpoint}
}

// Add records that endpoint k has been sent a prompt with the given chained block
// hashes. It marks the hashes most recently used, the first block the most recent of
// all, so that when the endpoint's set is full the ends of old prompts are forgotten
// before their beginnings, which other prompts are likelier to share. If hashes has more
// entries than the bound, only its leading ones are kept.
func (ix *Index) Add(k endpoint.Key, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	set, ok := ix.lookup(k)
	if !ok {
		v, _ := ix.endpoints.LoadOrStore(k, newBlockLRU())
		set = v.(*blockLRU)
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	for i := len(hashes) - 1; i >= 0; i-- {
		set.touch(hashes[i], ix.maxBlocks)
	}
}

// Match returns the number of leading hashes that endpoint k holds: n such that it
// holds hashes[0..n) but not hashes[n]. It returns 0 for an unknown endpoint and does
// not change recency.
func (ix *Index) Match(k endpoint.Key, hashes []uint64) int {
	set, ok := ix.lookup(k)
	if !ok {
		return 0
	}
	set.mu.RLock()
	defer set.mu.RUnlock()
	for n, h := range hashes {
		if _, held := set.slots[h]; !held {
			return n
		}
	}
	return len(hashes)
}

// Blocks returns the number of hashes endpoint k holds.
func (ix *Index) Blocks(k endpoint.Key) int {
	set, ok := ix.lookup(k)
	if !ok {
		return 0
	}
	set.mu.RLock()
	defer set.mu.RUnlock()
	return len(set.slots)
}

// Forget drops everything the index holds for endpoint k.
func (ix *Index) Forget(k endpoint.Key) {
	ix.endpoints.Delete(k)
}

// forgetIf drops the endpoints for which gone reports true. It calls gone without
// holding any lock of the index.
func (ix *Index) forgetIf(gone func(endpoint.Key) bool) {
	ix.endpoints.Range(func(k, _ any) bool {
		if key := k.(endpoint.Key); gone(key) {
			ix.endpoints.Delete(key)
		}
		return true
	})
}

// lookup returns the set of endpoint k, if the index has one.
func (ix *Index) lookup(k endpoint.Key) (*blockLRU, bool) {
	v, ok := ix.endpoints.Load(k)
	if !ok {
		return nil, false
	}
	return v.(*blockLRU), true
}

// blockLRU is one endpoint's bounded set of block hashes. Its nodes form a doubly linked
// recency list threaded through a slice by index, most recent at head; slots maps each
// held hash to its node. Index-linked nodes cost 16 bytes per hash and no allocation per
// insertion, against one pointer-linked entry allocation per insertion in a
// general-purpose LRU. mu guards every other field.
type blockLRU struct {
	mu         sync.RWMutex
	slots      map[uint64]int32
	nodes      []lruNode
	head, tail int32 // most and least recently used node; nilNode when empty
}

// lruNode is one held hash and its neighbours in the recency list.
type lruNode struct {
	hash       uint64
	prev, next int32 // towards head and towards tail; nilNode at the ends
}

// nilNode marks the absence of a node.
const nilNode = -1

func newBlockLRU() *blockLRU {
	return &blockLRU{slots: make(map[uint64]int32), head: nilNode, tail: nilNode}
}

// touch makes h the most recently used hash, inserting it if absent and, when the set
// already holds max hashes, reusing the least recently used one's node. The caller holds
// l.mu for writing.
func (l *blockLRU) touch(h uint64, max int) {
	if i, ok := l.slots[h]; ok {
		l.unlink(i)
		l.pushFront(i)
		return
	}
	var i int32
	if len(l.nodes) < max {
		i = int32(len(l.nodes))
		l.nodes = append(l.nodes, lruNode{})
	} else {
		i = l.tail
		l.unlink(i)
		delete(l.slots, l.nodes[i].hash)
	}
	l.nodes[i].hash = h
	l.slots[h] = i
	l.pushFront(i)
}

// unlink removes node i from the recency list.
func (l *blockLRU) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev == nilNode {
		l.head = n.next
	} else {
		l.nodes[n.prev].next = n.next
	}
	if n.next == nilNode {
		l.tail = n.prev
	} else {
		l.nodes[n.next].prev = n.prev
	}
}

// pushFront makes node i, not in the list, its head.
func (l *blockLRU) pushFront(i int32) {
	l.nodes[i].prev, l.nodes[i].next = nilNode, l.head
	if l.head == nilNode {
		l.tail = i
	} else {
		l.nodes[l.head].prev = i
	}
	l.head = i
}
