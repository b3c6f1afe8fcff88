package prefixcache_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
)

func TestBlockHashes(t *testing.T) {
	const blockSize = 2 // 8 bytes per block
	tests := []struct {
		name       string
		prompt     string
		blockSize  int
		wantBlocks int
	}{
		{name: "empty", prompt: "", blockSize: blockSize, wantBlocks: 0},
		{name: "shorter than a block", prompt: "1234567", blockSize: blockSize, wantBlocks: 0},
		{name: "one block", prompt: "12345678", blockSize: blockSize, wantBlocks: 1},
		{name: "partial trailing block ignored", prompt: "12345678abcdefgh123", blockSize: blockSize, wantBlocks: 2},
		{name: "zero block size", prompt: "12345678", blockSize: 0, wantBlocks: 0},
		{name: "negative block size", prompt: "12345678", blockSize: -3, wantBlocks: 0},
		{name: "huge block size", prompt: "12345678", blockSize: 1 << 62, wantBlocks: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := prefixcache.BlockHashes("m", tt.prompt, tt.blockSize, nil)
			if len(got) != tt.wantBlocks {
				t.Fatalf("BlockHashes(%q, %d) has %d hashes, want %d", tt.prompt, tt.blockSize, len(got), tt.wantBlocks)
			}
		})
	}
}

func TestBlockHashesChaining(t *testing.T) {
	const blockSize = 4 // 16 bytes per block
	// A 4-block shared prefix followed by 2 different blocks.
	system := strings.Repeat("You are helpful.", 4)
	a := prefixcache.BlockHashes("llama", system+strings.Repeat("A", 32), blockSize, nil)
	b := prefixcache.BlockHashes("llama", system+strings.Repeat("B", 32), blockSize, nil)
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("got %d and %d hashes, want 6 each", len(a), len(b))
	}
	if !slices.Equal(a[:4], b[:4]) {
		t.Errorf("hashes of a shared 4-block prefix differ: %x vs %x", a[:4], b[:4])
	}
	if a[4] == b[4] || a[5] == b[5] {
		t.Errorf("hashes of different blocks collide: %x vs %x", a[4:], b[4:])
	}

	// Chaining: equal block contents after different prefixes hash differently.
	c := prefixcache.BlockHashes("llama", strings.Repeat("X", 16)+strings.Repeat("A", 32), blockSize, nil)
	if c[1] == a[4] {
		t.Errorf("block hash does not depend on the preceding blocks")
	}

	// The model seeds the chain.
	other := prefixcache.BlockHashes("mistral", system, blockSize, nil)
	for i := range other {
		if other[i] == a[i] {
			t.Errorf("hash %d is equal for two models", i)
		}
	}

	// Deterministic, and appends to dst without touching what it holds.
	dst := prefixcache.BlockHashes("llama", system+strings.Repeat("A", 32), blockSize, []uint64{42})
	if dst[0] != 42 || !slices.Equal(dst[1:], a) {
		t.Errorf("BlockHashes with dst = %x, want 42 followed by %x", dst, a)
	}
}

func TestBlockHashesDoesNotAllocateWithCapacity(t *testing.T) {
	prompt := strings.Repeat("p", 4096)
	dst := make([]uint64, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		dst = prefixcache.BlockHashes("llama", prompt, 16, dst[:0])
	})
	if allocs != 0 {
		t.Errorf("BlockHashes allocated %v times per call, want 0", allocs)
	}
}

// FuzzBlockHashes checks that BlockHashes never panics, hashes exactly the whole blocks,
// and that the hashes of a prompt are a prefix of the hashes of any extension of it.
func FuzzBlockHashes(f *testing.F) {
	f.Add("llama", "You are a helpful assistant.", " Hello!", 1)
	f.Add("", "", "", 0)
	f.Add("m", strings.Repeat("abcd", 40), "efgh", 16)
	f.Add("m", "short", "", -1)
	f.Fuzz(func(t *testing.T, model, prompt, suffix string, blockSize int) {
		got := prefixcache.BlockHashes(model, prompt, blockSize, nil)
		want := 0
		if blockSize >= 1 && blockSize <= len(prompt)/4 {
			want = len(prompt) / (blockSize * 4)
		}
		if len(got) != want {
			t.Fatalf("%d hashes for %d bytes in blocks of %d tokens, want %d", len(got), len(prompt), blockSize, want)
		}
		longer := prefixcache.BlockHashes(model, prompt+suffix, blockSize, nil)
		if len(longer) < len(got) || !slices.Equal(longer[:len(got)], got) {
			t.Fatalf("hashes of the prompt %x are not a prefix of the extended prompt's %x", got, longer)
		}
	})
}
