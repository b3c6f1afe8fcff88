package prefixcache

import "github.com/cespare/xxhash/v2"

// bytesPerToken is the number of prompt bytes counted as one token until a tokenizer is
// configured; internal/enginesim and openai.Request.PromptTokens use the same rule.
const bytesPerToken = 4

// BlockHashes appends to dst the chained hashes of the whole blocks of prompt, a block
// being blockSize tokens of bytesPerToken (4) bytes, and returns the extended slice. A
// trailing partial block is not hashed, nor is anything when blockSize < 1.
//
// With h0 = xxhash(model), hash i is xxhash of block i seeded with hash i-1, so hash i
// identifies the model and the whole prefix up to the end of block i: prompts sharing a
// prefix share the leading hashes of the blocks it covers, and prompts of different
// models share none (barring 64-bit collisions). Seeding, rather than hashing the
// previous hash as a prefix of the block, keeps a block's bytes aligned to xxhash's
// stripes, so that they are hashed in place. BlockHashes allocates only when dst lacks
// capacity.
func BlockHashes(model, prompt string, blockSize int, dst []uint64) []uint64 {
	if blockSize < 1 || blockSize > len(prompt)/bytesPerToken {
		return dst
	}
	blockBytes := blockSize * bytesPerToken
	var d xxhash.Digest
	h := xxhash.Sum64String(model)
	for start := 0; start+blockBytes <= len(prompt); start += blockBytes {
		d.ResetWithSeed(h)
		_, _ = d.WriteString(prompt[start : start+blockBytes])
		h = d.Sum64()
		dst = append(dst, h)
	}
	return dst
}
