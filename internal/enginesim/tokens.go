package enginesim

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// bytesPerToken is the character-based token approximation shared with the router.
const bytesPerToken = 4

// CountTokens approximates the number of tokens of text as ceil(len(text)/4) bytes.
func CountTokens(text string) int {
	return (len(text) + bytesPerToken - 1) / bytesPerToken
}

// BlockHashes returns the chained hashes of every full block of blockSize tokens of text:
// hash i covers the hash of block i-1 followed by block i's bytes, so equal hashes mean
// equal prefixes. A trailing partial block is not hashed.
func BlockHashes(text string, blockSize int) []uint64 {
	blockBytes := blockSize * bytesPerToken
	n := len(text) / blockBytes
	hashes := make([]uint64, 0, n)
	var prev [8]byte
	d := xxhash.New()
	for i := range n {
		d.Reset()
		_, _ = d.Write(prev[:])
		_, _ = d.WriteString(text[i*blockBytes : (i+1)*blockBytes])
		h := d.Sum64()
		hashes = append(hashes, h)
		binary.LittleEndian.PutUint64(prev[:], h)
	}
	return hashes
}
