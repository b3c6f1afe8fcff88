//go:build amd64 && !purego

package openai

import "golang.org/x/sys/cpu"

// hasAVX2 is whether plainPrefix may read 32 bytes at a time.
var hasAVX2 = cpu.X86.HasAVX2

// plainPrefix returns the length of the longest prefix of b without backslashes or
// control characters, and ascii, which is true only if that prefix is all ASCII (it may
// be false when only bytes after the prefix are not). Runs of 32 bytes or more are
// read with AVX2 where the CPU has it: a long prompt is mostly such runs.
func plainPrefix(b []byte) (n int, ascii bool) {
	if len(b) >= 32 && hasAVX2 {
		n, high := plainPrefixAVX2(b)
		return n, !high
	}
	return plainPrefixWords(b)
}

// plainPrefixAVX2 is plainPrefix 32 bytes at a time, the last 32 overlapping the ones
// before, for a b of at least 32 bytes; high is whether a byte it read is not ASCII.
//
//go:noescape
func plainPrefixAVX2(b []byte) (n int, high bool)
