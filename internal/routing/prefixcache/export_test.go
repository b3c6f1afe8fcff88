package prefixcache

import (
	"sync/atomic"
	"time"
)

// CountHashing counts the prompts routers hash, and the bytes of prompt they hash, until
// the test ends; the test MUST NOT run in parallel with others that route.
func CountHashing(t interface{ Cleanup(func()) }) (prompts, bytes *atomic.Int64) {
	prompts, bytes = new(atomic.Int64), new(atomic.Int64)
	t.Cleanup(func() { hashPrompt = BlockHashes })
	hashPrompt = func(model, prompt string, blockSize int, dst []uint64) []uint64 {
		prompts.Add(1)
		bytes.Add(int64(len(prompt)))
		return BlockHashes(model, prompt, blockSize, dst)
	}
	return prompts, bytes
}

// SetRetouchEvery sets how often an Add of a set's most recent prompt, unchanged, moves
// its ticks on; 0: at every Add, as a model of the index expects.
func (ix *Index) SetRetouchEvery(d time.Duration) { ix.retouchEvery = d }

// SetRetouchEvery sets it for r's index.
func (r *Router) SetRetouchEvery(d time.Duration) { r.index.SetRetouchEvery(d) }
