package enginesim

import "testing"

func TestKVCacheEvictsLRUButNeverHeldBlocks(t *testing.T) {
	c := newKVCache(4)
	a, hit, ok := c.allocate([]uint64{1, 2}, 0)
	if !ok || hit != 0 {
		t.Fatalf("first allocation: ok=%v hit=%d", ok, hit)
	}
	b, _, ok := c.allocate([]uint64{3}, 0)
	if !ok {
		t.Fatal("second allocation failed")
	}
	c.release(a) // 1, 2 become idle, 1 least recently used
	if _, _, ok := c.allocate([]uint64{9}, 3); ok {
		t.Fatal("allocated 4 blocks with block 3 held")
	}
	d, _, ok := c.allocate([]uint64{4}, 1) // needs 2 blocks: evicts 1 and 2, keeps held 3
	if !ok {
		t.Fatal("allocation needing eviction failed")
	}
	if _, cached := c.blocks[3]; !cached {
		t.Fatal("held block evicted")
	}
	if got := c.cachedPrefix([]uint64{1, 2}); got != 0 {
		t.Fatalf("evicted prefix still cached (%d blocks)", got)
	}
	if c.usage() != 0.75 {
		t.Fatalf("usage %v, want 0.75", c.usage())
	}
	c.release(b)
	c.release(d)
	if c.usage() != 0 {
		t.Fatalf("usage %v after releasing everything", c.usage())
	}
	if _, hit, _ := c.allocate([]uint64{3, 5}, 0); hit != 1 {
		t.Fatalf("released block 3 should stay cached, hit=%d", hit)
	}
}

func TestBlockHashesChainPrefixes(t *testing.T) {
	a := BlockHashes("aaaabbbbccccdddd", 1)
	b := BlockHashes("aaaabbbbXXXXdddd", 1)
	if len(a) != 4 || a[0] != b[0] || a[1] != b[1] || a[2] == b[2] || a[3] == b[3] {
		t.Fatalf("hashes do not chain: %v vs %v", a, b)
	}
	if got := len(BlockHashes("aaaab", 1)); got != 1 {
		t.Fatalf("partial block hashed: %d hashes", got)
	}
	if CountTokens("") != 0 || CountTokens("a") != 1 || CountTokens("abcd") != 1 || CountTokens("abcde") != 2 {
		t.Fatal("CountTokens is not ceil(bytes/4)")
	}
}
