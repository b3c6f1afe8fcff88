package prefixcache

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Index remembers, for each endpoint, a bounded set of the prompt block hashes recently
// routed to it, forgetting the least recently added hashes first, as the engine's own
// prefix cache evicts. Create it with NewIndex; it is safe for concurrent use.
//
// Each endpoint's set belongs to one epoch of its engine (endpoint.Profile.Epoch): a set
// learnt before the engine restarted matches nothing and is cleared by the next Add. Each
// hash carries the tick of its last touch, so that Trim can forget everything the engine
// must have evicted before a given hash.
//
// Besides each endpoint's set, the index keeps the inverse for prompts' first blocks:
// which endpoints hold a given first block (Holders). As block hashes are chained, only
// those endpoints can hold any leading block of a prompt, so a decision asks Match of
// them alone rather than of every candidate.
//
// The index's memory is accounted to a Budget, which it may share with other indexes:
// an Add that takes the budget's total beyond its bound evicts blocks, of this index or
// of another, before returning (see Budget).
//
// Synchronisation model: the endpoint table is a sync.Map, whose lookups take no lock;
// entries are added by the first Add for an endpoint and removed by Forget. Each
// endpoint's set has its own RWMutex: Add, Trim and a budget's eviction hold it for
// writing, Match and Ticks for reading while they scan one prompt's hashes, and so does
// an Add that finds, under the read lock, that it would change nothing but ticks
// (retouchInterval). Such an Add also publishes the prompt as the set's mark (headMark),
// and Match, Ticks and such Adds of the prompt then read the mark with no lock at all:
// a read lock writes its reader count, which every other core's read must fetch again,
// and on a hot prompt every core reads the same set. Every write withdraws the mark
// first. No lock is held across endpoints, so scoring many endpoints never
// blocks on a global lock, and Adds to different endpoints never contend. The holders of
// first blocks are sharded by hash, each shard under its own RWMutex, taken only while
// its set's lock is held (writers) or alone (Holders); a holder is recorded when its set
// gains the first block and dropped when it loses it.
type Index struct {
	maxBlocks int
	// retouchEvery is how often an Add of a set's most recent prompt, unchanged, moves
	// the prompt's ticks on (see retouchInterval); 0: at every Add.
	retouchEvery time.Duration
	ledger       *ledger
	endpoints    sync.Map // endpoint.Key → *blockLRU
	firsts       [firstShards]firstShard
}

// retouchInterval is how often an Add of the prompt a set was last sent, unchanged, moves
// the ticks of the prompt's blocks on. Within it, such an Add changes nothing, under a
// read lock: on a hot prompt, the decisions of many cores do not each take the set's
// write lock and rewrite the blocks that every other core's decision reads. A receipt
// taken in the window shares the ticks of the last move, so that an engine's report that
// it lacked blocks then also trims them for the requests the window sent, which the next
// Add learns again.
const retouchInterval = time.Millisecond

// firstShards is the number of shards of the first blocks' holders.
const firstShards = 64

// firstShard maps first-block hashes to the endpoints holding them.
type firstShard struct {
	mu      sync.RWMutex
	holders map[uint64][]endpoint.Key
}

// Engine is what the index is told about an endpoint's engine when it learns.
type Engine struct {
	// Epoch is the engine's restart count; hashes learnt in another epoch are void.
	Epoch uint64
	// MaxBlocks bounds the endpoint's hashes below the index's bound, such as the blocks
	// the engine's KV cache can hold; 0 or more than the index's bound means that bound.
	MaxBlocks int
}

// NewIndex returns an empty index that keeps at most maxBlocksPerEndpoint hashes per
// endpoint, within budget; a nil budget bounds nothing but the endpoints. It panics if
// maxBlocksPerEndpoint is not in [1, 1<<31).
func NewIndex(maxBlocksPerEndpoint int, budget *Budget) *Index {
	if maxBlocksPerEndpoint < 1 || maxBlocksPerEndpoint >= 1<<31 {
		panic("prefixcache: maxBlocksPerEndpoint out of range")
	}
	ix := &Index{maxBlocks: maxBlocksPerEndpoint, retouchEvery: retouchInterval}
	for i := range ix.firsts {
		ix.firsts[i].holders = make(map[uint64][]endpoint.Key)
	}
	if budget != nil {
		ix.ledger = &ledger{budget: budget}
		budget.register(ix)
	}
	return ix
}

// Holders appends to dst the endpoints that hold first as a prompt's first block, in no
// particular order. An endpoint may be listed that Match then finds holding nothing, as
// when its engine restarted.
func (ix *Index) Holders(first uint64, dst []endpoint.Key) []endpoint.Key {
	sh := ix.shard(first)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return append(dst, sh.holders[first]...)
}

// shard returns the shard of first-block hash h.
func (ix *Index) shard(h uint64) *firstShard { return &ix.firsts[h%firstShards] }

// hold records that endpoint k holds first-block hash h.
func (ix *Index) hold(h uint64, k endpoint.Key) {
	sh := ix.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !slices.Contains(sh.holders[h], k) {
		sh.holders[h] = append(sh.holders[h], k)
	}
}

// release records that endpoint k no longer holds first-block hash h.
func (ix *Index) release(h uint64, k endpoint.Key) {
	sh := ix.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	keys := slices.DeleteFunc(sh.holders[h], func(o endpoint.Key) bool { return o == k })
	if len(keys) == 0 {
		delete(sh.holders, h)
	} else {
		sh.holders[h] = keys
	}
}

// Add records that endpoint k, whose engine is e, has been sent a prompt with the given
// chained block hashes. It marks the hashes most recently used, the first block the most
// recent of all, so that when the endpoint's set is full the ends of old prompts are
// forgotten before their beginnings, which other prompts are likelier to share. If
// hashes has more entries than the bound, only its leading ones are kept. If the
// index's budget is then exceeded, Add evicts before returning.
//
// Add returns the lowest tick the hashes it holds have when it returns, which every
// tick of an earlier touch of any hash is below, unless the Add changed nothing: an Add
// of the prompt the set was last sent, within retouchInterval of its last touch, leaves
// the hashes their ticks. Either way a Trim below the returned tick leaves the prompt,
// which the request has just sent to the engine. It returns 0 for no hashes.
func (ix *Index) Add(k endpoint.Key, hashes []uint64, e Engine) (floor uint64) {
	if len(hashes) == 0 {
		return 0
	}
	set, ok := ix.lookup(k)
	if !ok {
		v, _ := ix.endpoints.LoadOrStore(k, newBlockLRU(ix, k, e.Epoch))
		set = v.(*blockLRU)
	}
	bound := ix.maxBlocks
	if e.MaxBlocks > 0 && e.MaxBlocks < bound {
		bound = e.MaxBlocks
	}
	floor, changed := set.add(hashes, e.Epoch, bound, ix.retouchEvery)
	if changed {
		ix.ledger.enforce()
	}
	return floor
}

// Match returns the number of leading hashes that endpoint k holds in epoch: n such that
// it holds hashes[0..n) but not hashes[n]. It returns 0 for an unknown endpoint or
// another epoch and does not change recency.
func (ix *Index) Match(k endpoint.Key, hashes []uint64, epoch uint64) int {
	set, ok := ix.lookup(k)
	if !ok {
		return 0
	}
	n, _ := set.leading(hashes, epoch, false, nil)
	return n
}

// Ticks appends to dst the tick of the last touch of each leading hash endpoint k holds
// in epoch, stopping at the first it does not hold.
func (ix *Index) Ticks(k endpoint.Key, hashes []uint64, epoch uint64, dst []uint64) []uint64 {
	set, ok := ix.lookup(k)
	if !ok {
		return dst
	}
	_, dst = set.leading(hashes, epoch, true, dst)
	return dst
}

// Trim forgets every hash of endpoint k, in epoch, last touched at or before tick: what
// an engine evicting least recently used blocks first has evicted once it evicted a
// block last touched then. It returns the number of hashes forgotten.
func (ix *Index) Trim(k endpoint.Key, epoch, tick uint64) int {
	set, ok := ix.lookup(k)
	if !ok {
		return 0
	}
	set.lock()
	defer set.mu.Unlock()
	if set.epoch != epoch {
		return 0
	}
	n := 0
	for set.tail != nilNode && set.nodes[set.tail].tick() <= tick {
		set.evictTail()
		n++
	}
	return n
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
	if v, ok := ix.endpoints.LoadAndDelete(k); ok {
		v.(*blockLRU).drop()
	}
}

// forgetIf drops the endpoints for which gone reports true. It calls gone without
// holding any lock of the index.
func (ix *Index) forgetIf(gone func(endpoint.Key) bool) {
	ix.endpoints.Range(func(k, _ any) bool {
		if key := k.(endpoint.Key); gone(key) {
			ix.Forget(key)
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
// held hash to its node, and free lists the nodes of evicted hashes for reuse.
// Index-linked nodes cost 24 bytes per hash and no allocation per insertion, against one
// pointer-linked entry allocation per insertion in a general-purpose LRU. Ticks grow
// along the list from tail to head. The set tells its index, whose holders of first
// blocks it keeps up to date, as it gains and loses first blocks. The set is accounted
// to the index's budget for its nodes, free or not: the map and the slice keep their
// memory until the set is compacted (shed) or cleared. mu guards every field but index,
// key, lastAdd and mark; dropped is set once the set left the index, after which it tells the
// index nothing more and is accounted nothing.
type blockLRU struct {
	index      *Index
	key        endpoint.Key
	lastAdd    atomic.Uint64 // learnClock at the set's last Add, to the retouch interval
	mark       atomic.Pointer[headMark]
	mu         sync.RWMutex
	dropped    bool
	accounted  int // the nodes accounted to the budget
	epoch      uint64
	tick       uint64 // the last tick handed out
	touchedAt  uint64 // learnClock when the head prompt was last touched by an Add
	slots      map[uint64]int32
	nodes      []lruNode
	free       []int32
	head, tail int32 // most and least recently used node; nilNode when empty
}

// lruNode is one held hash, the tick of its last touch, whether the hash was touched as
// a prompt's first block, and its neighbours in the recency list.
type lruNode struct {
	hash       uint64
	stamp      uint64 // tick<<1 | 1 for a first block
	prev, next int32  // towards head and towards tail; nilNode at the ends
}

// tick returns the tick of n's last touch.
func (n *lruNode) tick() uint64 { return n.stamp >> 1 }

// first reports whether n's hash is a prompt's first block.
func (n *lruNode) first() bool { return n.stamp&1 != 0 }

// nilNode marks the absence of a node.
const nilNode = -1

func newBlockLRU(ix *Index, k endpoint.Key, epoch uint64) *blockLRU {
	return &blockLRU{index: ix, key: k, epoch: epoch, slots: make(map[uint64]int32), head: nilNode, tail: nilNode}
}

// drop releases the set's first blocks and its memory from the index once the set left
// it.
func (l *blockLRU) drop() {
	l.lock()
	defer l.mu.Unlock()
	l.releaseFirsts()
	l.dropped = true
	l.account()
}

// add touches hashes, the first one last, in epoch within bound, as Index.Add describes,
// unless they are the prompt the set was last sent, touched less than every ago. It
// returns the lowest tick of the hashes (floor) and whether it changed the set.
func (l *blockLRU) add(hashes []uint64, epoch uint64, bound int, every time.Duration) (floor uint64, changed bool) {
	now := learnClock()
	if last := l.lastAdd.Load(); now > last && now-last >= uint64(every) { // a store per interval, not per Add
		l.lastAdd.Store(now)
	}
	if every > 0 {
		if floor, ok := l.fresh(hashes, epoch, bound, now, every); ok {
			return floor, false
		}
	}
	l.lock()
	defer l.mu.Unlock()
	if l.epoch != epoch {
		l.clear(epoch)
	}
	l.shrink(bound)
	if !l.retouch(hashes) {
		for i := len(hashes) - 1; i >= 0; i-- {
			l.touch(hashes[i], bound, i == 0)
		}
	}
	l.touchedAt = now
	l.account()
	return l.floor(len(hashes)), true
}

// headMark is what a set publishes, for readers that take no lock, of a hot prompt: one
// sent again, unchanged, within the retouch interval (fresh). It holds the prompt's
// hashes, their ticks, and what an Add of it tests to change nothing. On a hot prompt,
// the decisions of every core then read the set without writing to a lock's reader
// count, which the other cores would have to fetch again. Any change to the set
// withdraws the mark under the write lock (lock), so that a reader finds either no mark
// or one that held when it loaded it.
type headMark struct {
	epoch     uint64
	hashes    []uint64 // the prompt's hashes, the first one at the set's head
	ticks     []uint64 // the tick of each hash
	touchedAt uint64
	held      int // the number of hashes the set holds
	floor     uint64
}

// lock locks the set for writing and withdraws its mark.
func (l *blockLRU) lock() {
	l.mu.Lock()
	l.mark.Store(nil)
}

// publish marks the set's n most recent hashes, a prompt's, as its head prompt, unless
// a mark is published already. The caller holds l.mu, for reading or writing: no change
// comes between what it found of the set and the mark.
func (l *blockLRU) publish(n int) {
	if l.mark.Load() != nil {
		return
	}
	m := &headMark{epoch: l.epoch, hashes: make([]uint64, 0, n), ticks: make([]uint64, 0, n),
		touchedAt: l.touchedAt, held: len(l.slots), floor: l.floor(n)}
	for i := l.head; len(m.hashes) < n; i = l.nodes[i].next {
		m.hashes = append(m.hashes, l.nodes[i].hash)
		m.ticks = append(m.ticks, l.nodes[i].tick())
	}
	l.mark.CompareAndSwap(nil, m) // readers may publish at once
}

// marked returns the set's mark when hashes, in epoch, are the leading hashes of its
// head prompt, which the set then holds.
func (l *blockLRU) marked(hashes []uint64, epoch uint64) (*headMark, bool) {
	m := l.mark.Load()
	if m == nil || m.epoch != epoch || len(hashes) > len(m.hashes) || !slices.Equal(hashes, m.hashes[:len(hashes)]) {
		return nil, false
	}
	return m, true
}

// leading returns how many leading hashes the set holds in epoch, as Index.Match
// describes, and, withTicks, appends the tick of each to dst: from the set's mark when
// hashes lead its head prompt, without a lock, and otherwise under the read lock.
func (l *blockLRU) leading(hashes []uint64, epoch uint64, withTicks bool, dst []uint64) (int, []uint64) {
	if m, ok := l.marked(hashes, epoch); ok {
		if withTicks {
			dst = append(dst, m.ticks[:len(hashes)]...)
		}
		return len(hashes), dst
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.epoch != epoch {
		return 0, dst
	}
	n := l.headRun(hashes)
	if withTicks {
		for i, j := l.head, 0; j < n; i, j = l.nodes[i].next, j+1 {
			dst = append(dst, l.nodes[i].tick())
		}
	}
	for ; n < len(hashes); n++ {
		i, held := l.slots[hashes[n]]
		if !held {
			break
		}
		if withTicks {
			dst = append(dst, l.nodes[i].tick())
		}
	}
	return n, dst
}

// fresh reports whether hashes are the prompt the set was last sent, in epoch and within
// bound, touched by an Add less than every before now: another Add of them would only
// move their ticks on. It returns their lowest tick when they are, and publishes them as
// the set's mark (headMark), which it reads without a lock when one is published.
func (l *blockLRU) fresh(hashes []uint64, epoch uint64, bound int, now uint64, every time.Duration) (floor uint64, ok bool) {
	if m, ok := l.marked(hashes, epoch); ok && len(hashes) == len(m.hashes) {
		return m.floor, m.held <= bound && now-m.touchedAt < uint64(every)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.epoch != epoch || len(l.slots) > bound || now-l.touchedAt >= uint64(every) ||
		l.headRun(hashes) < len(hashes) || !l.nodes[l.head].first() {
		return 0, false
	}
	l.publish(len(hashes)) // sent again: more Adds, Matches and Ticks of it are likely
	return l.floor(len(hashes)), true
}

// floor returns the lowest tick of the set's n most recent hashes, which an Add touches
// in order, the first one last, from the head along the list. The caller holds l.mu.
func (l *blockLRU) floor(n int) uint64 { return l.tick + 1 - uint64(n) }

// retouch is the touch of every hash, the first one last, when hashes are the set's most
// recent ones in order and the first is held as a first block, as after an Add of the
// same prompt: the order stays, and only the ticks move on, as touch would move them.
// It reports false, changing nothing, otherwise. The caller holds l.mu for writing.
func (l *blockLRU) retouch(hashes []uint64) bool {
	n := l.headRun(hashes)
	if n < len(hashes) || !l.nodes[l.head].first() {
		return false
	}
	tick := l.tick + uint64(len(hashes)) // the first hash's, the last touched
	for i := l.head; n > 0; i, n = l.nodes[i].next, n-1 {
		l.nodes[i].stamp = tick<<1 | l.nodes[i].stamp&1
		tick--
	}
	l.tick += uint64(len(hashes))
	return true
}

// headRun returns how many leading hashes are the set's most recent ones, in order, as
// after an Add of a prompt sharing them: those the set holds, found along its recency
// list rather than by a lookup each. The caller holds l.mu.
func (l *blockLRU) headRun(hashes []uint64) int {
	n := 0
	for i := l.head; n < len(hashes) && i != nilNode && l.nodes[i].hash == hashes[n]; i = l.nodes[i].next {
		n++
	}
	return n
}

// account tells the budget how many nodes the set holds since it last told it; a dropped
// set holds none. The caller holds l.mu for writing.
func (l *blockLRU) account() {
	n := len(l.nodes)
	if l.dropped {
		n = 0
	}
	if d := n - l.accounted; d != 0 {
		l.accounted = n
		l.index.ledger.add(d)
	}
}

// shed evicts the least recently used hashes, at least a quarter of the set's nodes and
// at least blocks of them unless the set has fewer, and compacts the set so that it
// keeps only the memory of the hashes it still holds. It reports whether the set had
// any memory to free.
func (l *blockLRU) shed(blocks int) bool {
	l.lock()
	defer l.mu.Unlock()
	if l.accounted == 0 {
		return false
	}
	keep := max(min(len(l.nodes)-blocks, len(l.nodes)*3/4), 0)
	for len(l.slots) > keep {
		l.evictTail()
	}
	l.compact()
	l.account()
	return true
}

// compact moves the held hashes into a new map and node slice of their size, most
// recent first, dropping the free nodes. The caller holds l.mu for writing.
func (l *blockLRU) compact() {
	nodes := make([]lruNode, 0, len(l.slots))
	slots := make(map[uint64]int32, len(l.slots))
	for i := l.head; i != nilNode; i = l.nodes[i].next {
		j := int32(len(nodes))
		nodes = append(nodes, lruNode{hash: l.nodes[i].hash, stamp: l.nodes[i].stamp, prev: j - 1, next: j + 1})
		slots[l.nodes[i].hash] = j
	}
	l.head, l.tail = nilNode, nilNode
	if n := int32(len(nodes)); n > 0 {
		nodes[n-1].next = nilNode
		l.head, l.tail = 0, n-1
	}
	l.nodes, l.slots, l.free = nodes, slots, nil
}

// releaseFirsts tells the index that the set no longer holds its first blocks. The
// caller holds l.mu for writing.
func (l *blockLRU) releaseFirsts() {
	if l.dropped {
		return
	}
	for h, i := range l.slots {
		if l.nodes[i].first() {
			l.index.release(h, l.key)
		}
	}
}

// clear empties the set for a new epoch of its engine, freeing its memory. The caller
// holds l.mu for writing and accounts the set afterwards.
func (l *blockLRU) clear(epoch uint64) {
	l.releaseFirsts()
	l.epoch = epoch
	l.slots = make(map[uint64]int32)
	l.nodes, l.free = nil, nil
	l.head, l.tail = nilNode, nilNode
}

// shrink evicts least recently used hashes until at most max remain. The caller holds
// l.mu for writing.
func (l *blockLRU) shrink(max int) {
	for len(l.slots) > max {
		l.evictTail()
	}
}

// touch makes h the most recently used hash, inserting it if absent and, when the set
// already holds max hashes, reusing the least recently used one's node; first tells
// whether h is a prompt's first block. The caller holds l.mu for writing.
func (l *blockLRU) touch(h uint64, max int, first bool) {
	l.tick++
	stamp := l.tick << 1
	if first {
		stamp |= 1
	}
	if i, ok := l.slots[h]; ok {
		l.unlink(i)
		if first && !l.nodes[i].first() && !l.dropped {
			l.index.hold(h, l.key)
		}
		l.nodes[i].stamp = stamp | l.nodes[i].stamp&1
		l.pushFront(i)
		return
	}
	if len(l.slots) >= max {
		l.evictTail()
	}
	var i int32
	if n := len(l.free); n > 0 {
		i, l.free = l.free[n-1], l.free[:n-1]
	} else {
		i = int32(len(l.nodes))
		l.nodes = append(l.nodes, lruNode{})
	}
	l.nodes[i].hash, l.nodes[i].stamp = h, stamp
	l.slots[h] = i
	l.pushFront(i)
	if first && !l.dropped {
		l.index.hold(h, l.key)
	}
}

// evictTail forgets the least recently used hash, whose node becomes free. The set is
// not empty; the caller holds l.mu for writing.
func (l *blockLRU) evictTail() {
	i := l.tail
	l.unlink(i)
	n := &l.nodes[i]
	delete(l.slots, n.hash)
	if n.first() && !l.dropped {
		l.index.release(n.hash, l.key)
	}
	l.free = append(l.free, i)
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
