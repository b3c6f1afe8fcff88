//go:build !amd64 || purego

package openai

// plainPrefix returns the length of the longest prefix of b without backslashes or
// control characters, and ascii, which is true only if that prefix is all ASCII (it may
// be false when only bytes after the prefix are not).
func plainPrefix(b []byte) (n int, ascii bool) {
	return plainPrefixWords(b)
}
