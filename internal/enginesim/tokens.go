package enginesim

import (
	"encoding/binary"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// bytesPerToken is the character-based token approximation shared with the router.
const bytesPerToken = 4

// CountTokens approximates the number of tokens of text as ceil(len(text)/4) bytes.
func CountTokens(text string) int {
	return (len(text) + bytesPerToken - 1) / bytesPerToken
}

// Token ids stand for bytesPerToken bytes of text: the id is those bytes read as a
// big-endian number, so the ids are below 2^32 and a text's last, shorter token has leading
// zero bytes. tokenIDs and detokenize are inverses for texts without NUL bytes.

// tokenIDs splits text into its tokens' ids.
func tokenIDs(text string) []int {
	ids := make([]int, 0, CountTokens(text))
	for len(text) > 0 {
		n := min(len(text), bytesPerToken)
		id := 0
		for i := range n {
			id = id<<8 | int(text[i])
		}
		ids = append(ids, id)
		text = text[n:]
	}
	return ids
}

// tokenText renders a token id as exactly bytesPerToken bytes (its low 32 bits), so a
// prompt of n ids counts n tokens and shares prefix-cache blocks with the text it tokenizes.
func tokenText(id int) string {
	var b [bytesPerToken]byte
	binary.BigEndian.PutUint32(b[:], uint32(id))
	return string(b[:])
}

// idsText is the prompt text of a list of token ids.
func idsText(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(tokenText(id))
	}
	return b.String()
}

// detokenize is the text of token ids, each rendered without its leading zero bytes.
func detokenize(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strings.TrimLeft(tokenText(id), "\x00"))
	}
	return b.String()
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
