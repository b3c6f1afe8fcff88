package enginesim

import "container/list"

// kvCache is a fixed pool of KV blocks with prefix caching. Hashed blocks stay cached after
// their last holder releases them and are evicted least-recently-used first when space is
// needed; blocks held by running requests are never evicted. It is not safe for concurrent
// use: the owning engine serialises access.
type kvCache struct {
	total int
	// held counts blocks referenced by at least one running request (hashed or not).
	held   int
	blocks map[uint64]*kvBlock
	// idle lists cached blocks with no holder, least recently used at the front.
	idle *list.List
}

type kvBlock struct {
	hash uint64
	refs int
	// elem is the block's position in idle while refs == 0.
	elem *list.Element
}

// kvAllocation is what a request holds in the cache until it releases it.
type kvAllocation struct {
	hashes    []uint64
	anonymous int
}

func newKVCache(total int) *kvCache {
	return &kvCache{total: total, blocks: map[uint64]*kvBlock{}, idle: list.New()}
}

// cachedPrefix returns how many leading blocks of hashes are cached.
func (c *kvCache) cachedPrefix(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// allocate reserves the blocks of a prompt with the given hashes plus extra unhashed
// blocks, evicting idle blocks as needed. It returns the number of leading blocks that were
// already cached, and false without side effects when the cache cannot fit the request.
func (c *kvCache) allocate(hashes []uint64, extra int) (kvAllocation, int, bool) {
	hit := c.cachedPrefix(hashes)
	idleReused := 0
	for _, h := range hashes {
		if b, ok := c.blocks[h]; ok && b.refs == 0 {
			idleReused++
		}
	}
	newHashed := 0
	for _, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			newHashed++
		}
	}
	need := newHashed + extra
	if need > c.total-c.held-idleReused {
		return kvAllocation{}, 0, false
	}
	for _, h := range hashes {
		b, ok := c.blocks[h]
		if !ok {
			b = &kvBlock{hash: h}
			c.blocks[h] = b
		}
		if b.refs == 0 {
			if b.elem != nil {
				c.idle.Remove(b.elem)
				b.elem = nil
			}
			c.held++
		}
		b.refs++
	}
	c.held += extra
	c.evictOverflow()
	return kvAllocation{hashes: hashes, anonymous: extra}, hit, true
}

// release returns an allocation's blocks; hashed blocks stay cached as most recently used.
func (c *kvCache) release(a kvAllocation) {
	for _, h := range a.hashes {
		b := c.blocks[h]
		b.refs--
		if b.refs == 0 {
			c.held--
			b.elem = c.idle.PushBack(b)
		}
	}
	c.held -= a.anonymous
}

// evictOverflow drops least-recently-used idle blocks until everything fits.
func (c *kvCache) evictOverflow() {
	for c.held+c.idle.Len() > c.total {
		b := c.idle.Remove(c.idle.Front()).(*kvBlock)
		delete(c.blocks, b.hash)
	}
}

// usage is the fraction of blocks held by running requests, as vLLM reports it.
func (c *kvCache) usage() float64 {
	return float64(c.held) / float64(c.total)
}
