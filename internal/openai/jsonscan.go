package openai

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads the tokens of a JSON text in memory, for parseFast, in the manner of
// jsontext.Decoder: peekKind, then a method that reads the token or value of that kind.
// It validates the text as RFC 8259 does, strings included (valid UTF-8, no control
// characters, known escapes), and is strict where it need not be exact: it reports
// failure, and parseFast gives up, on everything it does not accept, among which
// unpaired surrogate escapes (which encoding/json decodes as U+FFFD) and nesting deeper
// than encoding/json's limit.
//
// It exists for speed: jsontext checks a string byte by byte, which made the scan of a
// long prompt the largest part of what the gateway spent on a request with a long body. The
// scanner finds a string's end with bytes.IndexByte and checks the bytes before it 32
// at a time with AVX2 where the CPU has it, else a machine word at a time.
type scanner struct {
	data []byte
	pos  int
	// open holds the containers the scanner is in, innermost last.
	open []container
	// ready is whether pos is at the next token, past the white space and the separator
	// before it.
	ready bool
	// failed is set by the first error; every later call fails.
	failed bool
}

// container is an object or array being read.
type container struct {
	object bool
	// tokens counts the names and values read in it.
	tokens int
	// comma is whether a comma was read since its last value.
	comma bool
}

// maxNesting is the deepest nesting the scanner reads, the body's object included: that
// of encoding/json, which rejects deeper texts.
const maxNesting = 10000

// Kinds of tokens, as peekKind reports them: the first byte of the token, '0' for any
// number, and 0 for none (the end of the text, or an error).
const (
	kindNone   byte = 0
	kindNumber byte = '0'
)

// reset points the scanner at data.
func (s *scanner) reset(data []byte) {
	*s = scanner{data: data, open: s.open[:0]}
}

// fail records an error and returns false.
func (s *scanner) fail() bool {
	s.failed = true
	return false
}

// peekKind returns the kind of the next token without reading it.
func (s *scanner) peekKind() byte {
	if !s.next() || s.pos == len(s.data) {
		return kindNone
	}
	switch c := s.data[s.pos]; c {
	case '{', '}', '[', ']', '"', 't', 'f', 'n':
		return c
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return kindNumber
	}
	return kindNone
}

// next moves pos to the next token: past white space and the separator that must come
// before it in the container, if any.
func (s *scanner) next() bool {
	if s.failed {
		return false
	}
	if s.ready {
		return true
	}
	s.pos = skipSpace(s.data, s.pos)
	if len(s.open) > 0 {
		top := &s.open[len(s.open)-1]
		if top.tokens > 0 && s.pos < len(s.data) {
			switch c := s.data[s.pos]; {
			case top.object && top.tokens%2 == 1: // a name was read: its value follows
				if c != ':' {
					return s.fail()
				}
				s.pos = skipSpace(s.data, s.pos+1)
			case c == '}' || c == ']': // the container ends; end checks which
			case c == ',':
				s.pos = skipSpace(s.data, s.pos+1)
				top.comma = true
			default:
				return s.fail()
			}
		}
	}
	s.ready = true
	return true
}

// token records that a token was read: the scanner must find the next one anew, and a
// name in an object must be a string.
func (s *scanner) token(isString bool) bool {
	s.ready = false
	if len(s.open) == 0 {
		return true
	}
	top := &s.open[len(s.open)-1]
	if top.object && top.tokens%2 == 0 && !isString {
		return s.fail()
	}
	top.tokens++
	top.comma = false
	return true
}

// begin reads the '{' or '[' (kind) that opens an object or array.
func (s *scanner) begin(kind byte) bool {
	if s.peekKind() != kind || len(s.open) == maxNesting || !s.token(false) {
		return s.fail()
	}
	s.pos++
	s.open = append(s.open, container{object: kind == '{'})
	return true
}

// end reads the '}' or ']' that closes the innermost object or array.
func (s *scanner) end() bool {
	k := s.peekKind()
	if len(s.open) == 0 {
		return s.fail()
	}
	top := s.open[len(s.open)-1]
	want := byte(']')
	if top.object {
		want = '}'
	}
	if k != want || top.comma || (top.object && top.tokens%2 == 1) {
		return s.fail()
	}
	s.pos++
	s.open = s.open[:len(s.open)-1]
	s.ready = false
	return true
}

// atEnd reports whether nothing but white space follows the value read last.
func (s *scanner) atEnd() bool {
	if s.failed || len(s.open) > 0 {
		return false
	}
	s.pos = skipSpace(s.data, s.pos)
	return s.pos == len(s.data)
}

// quoted reads a string and writes its text, decoded as encoding/json decodes it into a
// Go string, to t, unless t is nil.
func (s *scanner) quoted(t *textBuf) bool {
	if s.peekKind() != '"' || !s.token(true) {
		return s.fail()
	}
	end, ok := scanString(s.data, s.pos+1, t)
	if !ok {
		return s.fail()
	}
	s.pos = end + 1
	return true
}

// number reads a number and returns its text.
func (s *scanner) number() ([]byte, bool) {
	if s.peekKind() != kindNumber || !s.token(false) {
		return nil, s.fail()
	}
	start := s.pos
	end, ok := scanNumber(s.data, start)
	if !ok {
		return nil, s.fail()
	}
	s.pos = end
	return s.data[start:end], true
}

// skip reads the next value, whatever it is, nested values included.
func (s *scanner) skip() bool {
	depth := len(s.open)
	for {
		switch k := s.peekKind(); k {
		case '{', '[':
			if !s.begin(k) {
				return false
			}
		case '}', ']':
			if len(s.open) == depth || !s.end() {
				return s.fail()
			}
		case '"':
			if !s.quoted(nil) {
				return false
			}
		case kindNumber:
			if _, ok := s.number(); !ok {
				return false
			}
		case 't', 'f', 'n':
			if !s.literal(k) {
				return false
			}
		default:
			return s.fail()
		}
		if len(s.open) == depth {
			return true
		}
	}
}

// literal reads true, false or null (by its first letter c).
func (s *scanner) literal(c byte) bool {
	word := "null"
	switch c {
	case 't':
		word = "true"
	case 'f':
		word = "false"
	}
	if !s.token(false) || !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		return s.fail()
	}
	s.pos += len(word)
	return true
}

// scanNumber returns the end of the number that starts at data[i], per RFC 8259:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanNumber(data []byte, i int) (end int, ok bool) {
	digits := func() bool {
		start := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case !digits():
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	return i, true
}

// scanString returns the index of the quote that ends the string whose text starts at
// data[i], and writes the text, decoded, to t unless t is nil. It fails on a string that
// does not end, a control character, invalid UTF-8, an unknown escape and a surrogate
// escape that is not half of a pair; t then holds part of the text.
//
// The end is where bytes.IndexByte finds a quote that no backslash escapes; the bytes
// before it are checked a word at a time for backslashes, control characters and bytes
// outside ASCII, and written to t a run between escapes at a time. A string with bytes
// outside ASCII is checked by utf8.Valid once, escapes included: they are ASCII, which
// no UTF-8 sequence spans.
func scanString(data []byte, i int, t *textBuf) (end int, ok bool) {
	start := i
	quote := -1 // the next quote at or after i, once found
	ascii := true
	for {
		if quote < i {
			q := bytes.IndexByte(data[i:], '"')
			if q < 0 {
				return 0, false
			}
			quote = i + q
		}
		n, runASCII := plainPrefix(data[i:quote])
		ascii = ascii && runASCII
		if t != nil {
			t.write(data[i : i+n])
		}
		if i += n; i == quote {
			return quote, ascii || utf8.Valid(data[start:quote])
		}
		if data[i] != '\\' { // a control character
			return 0, false
		}
		r, size := unescape(data[i:])
		if size == 0 {
			return 0, false
		}
		if t != nil {
			t.writeRune(r)
		}
		i += size
	}
}

// Masks of a byte repeated over a word.
const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// plainPrefixWords is plainPrefix a machine word at a time, the last word overlapping
// the one before, and only a b shorter than a word byte by byte.
func plainPrefixWords(b []byte) (n int, ascii bool) {
	if len(b) < 8 {
		return plainPrefixBytes(b)
	}
	var high uint64
	for ; n+8 <= len(b); n += 8 {
		w := binary.LittleEndian.Uint64(b[n:])
		high |= w
		if s := special(w); s != 0 {
			return n + bits.TrailingZeros64(s)/8, high&highBits == 0
		}
	}
	if n == len(b) {
		return n, high&highBits == 0
	}
	// The last word overlaps bytes read already: they are plain, so the lowest flag, if
	// any, is in the bytes not read yet.
	last := len(b) - 8
	w := binary.LittleEndian.Uint64(b[last:])
	high |= w
	if s := special(w); s != 0 {
		return last + bits.TrailingZeros64(s)/8, high&highBits == 0
	}
	return len(b), high&highBits == 0
}

// plainPrefixBytes is plainPrefix byte by byte, for runs shorter than a word, and the
// definition the faster versions are tested against.
func plainPrefixBytes(b []byte) (n int, ascii bool) {
	ascii = true
	for ; n < len(b); n++ {
		c := b[n]
		if c < 0x20 || c == '\\' {
			break
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	return n, ascii
}

// special returns a word with the high bit of a byte set where w has a byte below 0x20
// or a backslash (where w^0x5c is 0). A borrow may also flag bytes above the first such
// byte, never below it, so the lowest flag is exact.
func special(w uint64) uint64 {
	return ((w - 0x20*lowBits) | ((w ^ 0x5c*lowBits) - lowBits)) &^ w & highBits
}

// unescape decodes the escape at the start of b, a backslash and what follows: it
// returns the rune the escape stands for and the escape's length, 2, 6 for \uXXXX or 12
// for a pair of surrogate escapes; size is 0 when it is not an escape encoding/json
// decodes exactly.
func unescape(b []byte) (r rune, size int) {
	if len(b) < 2 {
		return 0, 0
	}
	switch b[1] {
	case '"', '\\', '/':
		return rune(b[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
	default:
		return 0, 0
	}
	r, ok := hexEscape(b)
	switch {
	case !ok:
		return 0, 0
	case !utf16.IsSurrogate(r):
		return r, 6
	case r >= 0xdc00: // a low surrogate first
		return 0, 0
	}
	low, ok := hexEscape(b[6:])
	if !ok || low < 0xdc00 || low > 0xdfff {
		return 0, 0
	}
	return utf16.DecodeRune(r, low), 12
}

// hexEscape decodes a \uXXXX escape at the start of b.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
