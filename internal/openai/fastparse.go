package openai

import (
	"bytes"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// parseFast is ParseRequest in a single pass over the body with scanner, a streaming
// tokenizer: it decodes the fields ParseRequest reads and flattens the prompt into one
// buffer as it goes, skipping every other value. Duplicate object names are accepted,
// as encoding/json accepts them, but not among the fields parseFast reads. Invalid
// UTF-8, which encoding/json accepts, is an error of scanner: parseFast gives up on it,
// and in exchange copies the runs of its strings without checking them again.
//
// It handles the valid bodies clients send and gives up (ok is false) on everything
// else: any syntax error or error ParseRequest reports, and valid but unusual bodies
// whose decoding by encoding/json is subtle: duplicate keys among the fields read, keys
// that are not ASCII or match a field only case-insensitively, and strings of invalid
// UTF-8 or with unpaired surrogate escapes. When ok is true,
// the result is the one parseRequestJSON returns; FuzzParseFast checks that.
func parseFast(data []byte) (req Request, ok bool) {
	p := fastParsers.Get().(*fastParser)
	defer p.release()
	p.reset(data)
	if !p.begin('{') {
		return Request{}, false
	}
	const (
		seenModel = 1 << iota
		seenStream
		seenMaxTokens
		seenMaxCompletionTokens
		seenMessages
		seenPrompt
	)
	var (
		seen                         int
		maxTokens, maxCompletionToks int64 = -1, -1 // -1: not given
		hasMessages, hasPrompt       bool
		out                          []byte // the prompt
		modelBuf                     [64]byte
		model                        []byte
	)
	for p.peekKind() != '}' {
		key, ok := p.key()
		if !ok {
			return Request{}, false
		}
		var field int
		switch string(key) {
		case "model":
			field = seenModel
		case "stream":
			field = seenStream
		case "max_tokens":
			field = seenMaxTokens
		case "max_completion_tokens":
			field = seenMaxCompletionTokens
		case "messages":
			field = seenMessages
		case "prompt":
			field = seenPrompt
		default:
			if foldsToAny(key, bodyFields) || !p.skip() {
				return Request{}, false
			}
			continue
		}
		if seen&field != 0 {
			return Request{}, false
		}
		seen |= field
		switch k := p.peekKind(); {
		case k == 'n': // null: the field is absent
			ok = p.skip()
		case field == seenModel && k == '"':
			model, ok = p.appendString(modelBuf[:0])
			req.Model = string(model)
		case field == seenStream && (k == 't' || k == 'f'):
			req.Stream, ok = k == 't', p.skip()
		case field == seenMaxTokens:
			maxTokens, ok = p.length()
		case field == seenMaxCompletionTokens:
			maxCompletionToks, ok = p.length()
		case field == seenMessages && k == '[':
			hasMessages = true
			// The prompt is rarely longer than the rest of the body: JSON syntax and
			// escapes take more room than the separators the flattening adds.
			out = make([]byte, 0, len(data)-p.pos)
			out, ok = p.messages(out)
		case field == seenPrompt && (k == '"' || k == '['):
			hasPrompt = true
			out = make([]byte, 0, len(data)-p.pos)
			out, ok = p.prompt(out)
		default:
			ok = false
		}
		if !ok {
			return Request{}, false
		}
	}
	if !p.end() || req.Model == "" || hasMessages == hasPrompt || !p.atEnd() {
		return Request{}, false
	}
	switch {
	case maxCompletionToks >= 0:
		req.MaxTokens = maxCompletionToks
	case maxTokens >= 0:
		req.MaxTokens = maxTokens
	}
	req.Chat = hasMessages
	req.Endpoint = EndpointCompletions
	if hasMessages {
		req.Endpoint = EndpointChatCompletions
	}
	// out is never written again: the string shares its bytes rather than copy a prompt
	// that may be hundreds of kilobytes long.
	req.Prompt = unsafe.String(unsafe.SliceData(out), len(out))
	return req, true
}

// The JSON names of the fields of body, message and contentPart. A key that matches one
// of them case-insensitively but not exactly makes parseFast give up.
var (
	bodyFields    = []string{"model", "stream", "max_tokens", "max_completion_tokens", "messages", "prompt"}
	messageFields = []string{"role", "content"}
	partFields    = []string{"type", "text"}
)

// foldsToAny reports whether key equals one of names ignoring ASCII case, the way
// encoding/json matches ASCII object keys to struct fields. Keys that are not ASCII
// never reach it: fastParser.key gives up on them.
func foldsToAny(key []byte, names []string) bool {
	for _, name := range names {
		if bytes.EqualFold(key, []byte(name)) {
			return true
		}
	}
	return false
}

// fastParser reads the body's tokens. Its methods return false on any decoding error
// and on input they do not handle; parseFast then gives up.
//
// Parsers are kept in fastParsers between bodies, so that neither the scanner's stack
// nor the buffers are allocated per body.
type fastParser struct {
	scanner
	// keyBuf holds the last decoded object key, pending a message's content while its
	// role, which comes first in the prompt, has not been read yet, and partType the
	// "type" of a content part.
	keyBuf, pending, partType []byte
}

// fastParsers hold the idle parsers (*fastParser).
var fastParsers = sync.Pool{New: func() any { return new(fastParser) }}

// maxPooledPendingBytes is the capacity of the largest pending buffer kept with a
// parser, and maxPooledNesting that of the largest stack of open containers.
const (
	maxPooledPendingBytes = 64 << 10
	maxPooledNesting      = 64
)

// release forgets the body, so that the pool does not keep it alive, and returns the
// parser to fastParsers.
func (p *fastParser) release() {
	p.reset(nil)
	if cap(p.pending) > maxPooledPendingBytes {
		p.pending = nil
	}
	if cap(p.open) > maxPooledNesting {
		p.open = nil
	}
	fastParsers.Put(p)
}

// key reads an object key. It gives up on keys that are not ASCII, which encoding/json
// may match to a field under Unicode case folding (ſ and K fold to s and k).
func (p *fastParser) key() ([]byte, bool) {
	var ok bool
	if p.keyBuf, ok = p.appendString(p.keyBuf[:0]); !ok {
		return nil, false
	}
	for _, c := range p.keyBuf {
		if c >= utf8.RuneSelf {
			return nil, false
		}
	}
	return p.keyBuf, true
}

// appendString reads a string and appends its decoded contents to dst, as encoding/json
// decodes it into a Go string.
func (p *fastParser) appendString(dst []byte) ([]byte, bool) {
	inner, escaped, ok := p.quoted()
	switch {
	case !ok:
		return dst, false
	case !escaped:
		return append(dst, inner...), true
	}
	return appendUnquoted(dst, inner), true
}

// appendUnquoted appends to dst the decoded contents of inner, the text between the
// quotes of a string the scanner has validated (valid UTF-8, surrogate escapes in
// pairs), as encoding/json decodes it. The runs between escapes are copied whole rather
// than byte by byte.
func appendUnquoted(dst, inner []byte) []byte {
	for {
		i := bytes.IndexByte(inner, '\\')
		if i < 0 {
			return append(dst, inner...)
		}
		dst = append(dst, inner[:i]...)
		// The scanner validated the escape: a known character, or four hex digits and
		// surrogates in pairs.
		esc := inner[i:]
		inner = esc[2:]
		switch esc[1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hexEscape(esc)
			inner = esc[6:]
			if utf16.IsSurrogate(r) { // \uD8xx\uDCxx
				low, _ := hexEscape(inner)
				r, inner = utf16.DecodeRune(r, low), inner[6:]
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\' and '/' stand for themselves
			dst = append(dst, esc[1])
		}
	}
}

// messages flattens a non-empty array of messages onto out.
func (p *fastParser) messages(out []byte) ([]byte, bool) {
	if !p.begin('[') || p.peekKind() == ']' { // empty: an error
		return out, false
	}
	for p.peekKind() != ']' {
		var ok bool
		if out, ok = p.message(out); !ok {
			return out, false
		}
	}
	return out, p.end()
}

// message appends role + ": " + text + "\n" for a message object.
func (p *fastParser) message(out []byte) ([]byte, bool) {
	if !p.begin('{') {
		return out, false
	}
	var seenRole, seenContent bool
	for p.peekKind() != '}' {
		key, ok := p.key()
		if !ok {
			return out, false
		}
		switch string(key) {
		case "role":
			if seenRole {
				return out, false
			}
			seenRole = true
			n := len(out)
			if out, ok = p.appendString(out); !ok || len(out) == n { // empty roles are errors
				return out, false
			}
			out = append(out, ": "...)
			if seenContent {
				out = append(out, p.pending...)
			}
		case "content":
			if seenContent {
				return out, false
			}
			seenContent = true
			if seenRole {
				out, ok = p.content(out)
			} else {
				p.pending, ok = p.content(p.pending[:0])
			}
		default:
			ok = !foldsToAny(key, messageFields) && p.skip()
		}
		if !ok {
			return out, false
		}
	}
	if !seenRole || !p.end() {
		return out, false
	}
	return append(out, '\n'), true
}

// content appends the text of a message content: a string, an array of content parts
// or null.
func (p *fastParser) content(dst []byte) ([]byte, bool) {
	switch p.peekKind() {
	case '"':
		return p.appendString(dst)
	case 'n':
		return dst, p.skip()
	case '[':
	default:
		return dst, false
	}
	if !p.begin('[') {
		return dst, false
	}
	for p.peekKind() != ']' {
		var ok bool
		if dst, ok = p.contentPart(dst); !ok {
			return dst, false
		}
	}
	return dst, p.end()
}

// contentPart appends the text of a content part of type "text".
func (p *fastParser) contentPart(dst []byte) ([]byte, bool) {
	if !p.begin('{') {
		return dst, false
	}
	mark := len(dst)
	var seenType, seenText, isText bool
	for p.peekKind() != '}' {
		key, ok := p.key()
		if !ok {
			return dst, false
		}
		switch string(key) {
		case "type":
			if seenType {
				return dst, false
			}
			seenType = true
			switch p.peekKind() {
			case '"':
				p.partType, ok = p.appendString(p.partType[:0])
				isText = string(p.partType) == "text"
			case 'n':
				ok = p.skip()
			default:
				ok = false
			}
		case "text":
			if seenText {
				return dst, false
			}
			seenText = true
			switch p.peekKind() {
			case '"':
				dst, ok = p.appendString(dst)
			case 'n':
				ok = p.skip()
			default:
				ok = false
			}
		default:
			ok = !foldsToAny(key, partFields) && p.skip()
		}
		if !ok {
			return dst, false
		}
	}
	if !isText { // the text, if any, was appended before the type was known
		dst = dst[:mark]
	}
	return dst, p.end()
}

// prompt appends a completion prompt: a string or a non-empty array of strings.
func (p *fastParser) prompt(out []byte) ([]byte, bool) {
	if p.peekKind() == '"' {
		return p.appendString(out)
	}
	if !p.begin('[') || p.peekKind() == ']' { // empty: an error
		return out, false
	}
	for p.peekKind() != ']' {
		var ok bool
		if out, ok = p.appendString(out); !ok {
			return out, false
		}
	}
	return out, p.end()
}

// length reads a completion length: a non-negative JSON number that strconv.ParseInt
// accepts, as encoding/json requires of an int64.
func (p *fastParser) length() (int64, bool) {
	v, ok := p.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
