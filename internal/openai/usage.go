package openai

import (
	"bytes"
	"encoding/json"
	"io"
)

// Usage is what an OpenAI-compatible response's usage object says about the prompt.
type Usage struct {
	// PromptTokens is usage.prompt_tokens: the number of tokens in the prompt.
	PromptTokens int64
	// CachedTokens is usage.prompt_tokens_details.cached_tokens: how many of the prompt's
	// tokens the engine found in its prefix cache.
	CachedTokens int64
}

// usageTail is the number of a response's last bytes a UsageScanner keeps at least: the
// end of a JSON body, or the final chunks of an event stream, which is where engines put
// the usage object.
const usageTail = 4 << 10

// usageKey is the key Usage looks for.
var usageKey = []byte(`"usage"`)

// usageCandidates bounds how many "usage" keys, from the last back, Usage looks at for a
// complete object, so that adversarial bytes cost at most a few passes over the tail.
const usageCandidates = 8

// UsageScanner watches the bytes of one relayed response and reports the last usage
// object seen. Write it every chunk as it is relayed, whole JSON body or event stream
// alike; it never fails and keeps only a bounded tail of what it was given (at least the
// last 4 KiB, at most 8 KiB), allocated on the first Write and reused after it. The zero
// value is ready to use. A UsageScanner is not safe for concurrent use: one goroutine
// writes it and then calls Usage.
type UsageScanner struct {
	tail []byte // the last bytes written: all of them while fewer than usageTail, else at least usageTail
}

var _ io.Writer = (*UsageScanner)(nil)

// Write keeps the end of p as part of the response's tail. It always returns len(p), nil.
func (s *UsageScanner) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	if s.tail == nil {
		s.tail = make([]byte, 0, 2*usageTail)
	}
	if n >= usageTail {
		s.tail = append(s.tail[:0], p[n-usageTail:]...)
		return n, nil
	}
	if len(s.tail)+n > cap(s.tail) {
		// Here len(s.tail) > usageTail > n: keep the last usageTail bytes, then p fits.
		s.tail = s.tail[:copy(s.tail, s.tail[len(s.tail)-usageTail:])]
	}
	s.tail = append(s.tail, p...)
	return n, nil
}

// Reset forgets everything written, keeping the buffer for the next response.
func (s *UsageScanner) Reset() { s.tail = s.tail[:0] }

// Usage reports the last complete usage object in the kept tail: the value of the last
// "usage" key that is an object whose closing brace was written. Keys inside JSON
// strings (a model writing about usage) do not count, nor do "usage": null and objects
// still incomplete, which give way to an earlier usage object. ok reports whether that
// object gives prompt_tokens_details.cached_tokens as an integer; it is false when there
// is no usage object, when the object has no cached_tokens or "prompt_tokens_details":
// null, or when it is not valid JSON. PromptTokens is set whenever the object gives it,
// ok or not. A usage object that began before the kept tail is not seen.
func (s *UsageScanner) Usage() (u Usage, ok bool) {
	buf := s.tail
	end := len(buf)
	for range usageCandidates {
		i := bytes.LastIndex(buf[:end], usageKey)
		if i < 0 {
			return Usage{}, false
		}
		end = i
		if escaped(buf, i) {
			continue // the quote is inside a string
		}
		j := skipSpace(buf, i+len(usageKey))
		if j == len(buf) || buf[j] != ':' {
			continue // a string value "usage", not a key
		}
		j = skipSpace(buf, j+1)
		if j == len(buf) || buf[j] != '{' {
			continue // null, another value, or not written yet
		}
		n := objectLen(buf[j:])
		if n < 0 {
			continue // the object is not complete
		}
		return decodeUsage(buf[j : j+n])
	}
	return Usage{}, false
}

// decodeUsage reads a usage object.
func decodeUsage(obj []byte) (Usage, bool) {
	var v struct {
		PromptTokens        *int64 `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	if json.Unmarshal(obj, &v) != nil {
		return Usage{}, false
	}
	var u Usage
	if v.PromptTokens != nil {
		u.PromptTokens = *v.PromptTokens
	}
	if v.PromptTokensDetails == nil || v.PromptTokensDetails.CachedTokens == nil {
		return u, false
	}
	u.CachedTokens = *v.PromptTokensDetails.CachedTokens
	return u, true
}

// escaped reports whether the quote at b[i] is escaped, that is preceded by an odd
// number of backslashes.
func escaped(b []byte, i int) bool {
	n := 0
	for i > 0 && b[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

// skipSpace returns the index of the first byte at or after i that is not JSON
// whitespace, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// objectLen returns the length of the JSON object that b starts with (b[0] is '{'),
// matching braces outside strings, or -1 when b ends before the object does. It does
// not validate the object.
func objectLen(b []byte) int {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++ // skip the escaped byte
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
