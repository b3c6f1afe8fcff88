package openai

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// fastOptions make the jsontext decoder accept duplicate object names, as encoding/json
// does (parseFast gives up on duplicates of the fields it reads). Invalid UTF-8, which
// encoding/json accepts, is an error here: parseFast gives up on it, and in exchange
// copies the runs of its strings without checking them again.
var fastOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true)}

// parseFast is ParseRequest in a single pass over the body with the jsontext streaming
// tokenizer: it decodes the fields ParseRequest reads and flattens the prompt into one
// buffer as it goes, skipping every other value.
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
	for p.dec.PeekKind() != '}' {
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
			if foldsToAny(key, bodyFields) || p.dec.SkipValue() != nil {
				return Request{}, false
			}
			continue
		}
		if seen&field != 0 {
			return Request{}, false
		}
		seen |= field
		switch k := p.dec.PeekKind(); {
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
			out = make([]byte, 0, len(data)-int(p.dec.InputOffset()))
			out, ok = p.messages(out)
		case field == seenPrompt && (k == '"' || k == '['):
			hasPrompt = true
			out = make([]byte, 0, len(data)-int(p.dec.InputOffset()))
			out, ok = p.prompt(out)
		default:
			ok = false
		}
		if !ok {
			return Request{}, false
		}
	}
	if !p.end() || req.Model == "" || hasMessages == hasPrompt {
		return Request{}, false
	}
	if _, err := p.dec.ReadToken(); err != io.EOF { // nothing may follow the object
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
// Parsers are kept in fastParsers between bodies, so that neither the decoder's state
// nor the buffers are allocated per body.
type fastParser struct {
	dec *jsontext.Decoder
	// src is what dec reads: a bytes.Buffer, unlike a bytes.Reader, lets the decoder
	// read the body in place rather than copy it into a buffer of its own.
	src bytes.Buffer
	// keyBuf holds the last decoded object key, pending a message's content while its
	// role, which comes first in the prompt, has not been read yet, and partType the
	// "type" of a content part.
	keyBuf, pending, partType []byte
}

// fastParsers hold the idle parsers (*fastParser).
var fastParsers = sync.Pool{New: func() any {
	p := new(fastParser)
	p.dec = jsontext.NewDecoder(&p.src, fastOptions...)
	return p
}}

// maxPooledPendingBytes is the capacity of the largest pending buffer kept with a
// parser.
const maxPooledPendingBytes = 64 << 10

// reset points the parser at data.
func (p *fastParser) reset(data []byte) {
	p.src = *bytes.NewBuffer(data)
	p.dec.Reset(&p.src, fastOptions...)
}

// release forgets the body, so that the pool does not keep it alive, and returns the
// parser to fastParsers.
func (p *fastParser) release() {
	p.reset(nil)
	if cap(p.pending) > maxPooledPendingBytes {
		p.pending = nil
	}
	fastParsers.Put(p)
}

// begin reads the '{' or '[' (kind) that starts an object or array.
func (p *fastParser) begin(kind jsontext.Kind) bool {
	if p.dec.PeekKind() != kind {
		return false
	}
	_, err := p.dec.ReadToken()
	return err == nil
}

// end reads the '}' or ']' that ends an object or array.
func (p *fastParser) end() bool {
	_, err := p.dec.ReadToken()
	return err == nil
}

// skip reads and discards the next value.
func (p *fastParser) skip() bool { return p.dec.SkipValue() == nil }

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
	if p.dec.PeekKind() != '"' {
		return dst, false
	}
	v, err := p.dec.ReadValue()
	if err != nil {
		return dst, false
	}
	return appendUnquoted(dst, v[1:len(v)-1]), true
}

// appendUnquoted appends to dst the decoded contents of inner, the text between the
// quotes of a string the decoder has validated (valid UTF-8, surrogate escapes in
// pairs), as encoding/json decodes it. The runs between escapes are copied whole rather
// than byte by byte.
func appendUnquoted(dst, inner []byte) []byte {
	for {
		i := bytes.IndexByte(inner, '\\')
		if i < 0 {
			return append(dst, inner...)
		}
		dst = append(dst, inner[:i]...)
		// The decoder validated the escape: a known character or four hex digits.
		c := inner[i+1]
		inner = inner[i+2:]
		switch c {
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
			r := hexRune(inner)
			inner = inner[4:]
			if utf16.IsSurrogate(r) { // the decoder validated the pair: \uD8xx\uDCxx
				r = utf16.DecodeRune(r, hexRune(inner[2:]))
				inner = inner[6:]
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\' and '/' stand for themselves
			dst = append(dst, c)
		}
	}
}

// hexRune returns the rune of the four hex digits b starts with, which the decoder
// validated.
func hexRune(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// messages flattens a non-empty array of messages onto out.
func (p *fastParser) messages(out []byte) ([]byte, bool) {
	if !p.begin('[') || p.dec.PeekKind() == ']' { // empty: an error
		return out, false
	}
	for p.dec.PeekKind() != ']' {
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
	for p.dec.PeekKind() != '}' {
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
	switch p.dec.PeekKind() {
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
	for p.dec.PeekKind() != ']' {
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
	for p.dec.PeekKind() != '}' {
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
			switch p.dec.PeekKind() {
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
			switch p.dec.PeekKind() {
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
	if p.dec.PeekKind() == '"' {
		return p.appendString(out)
	}
	if !p.begin('[') || p.dec.PeekKind() == ']' { // empty: an error
		return out, false
	}
	for p.dec.PeekKind() != ']' {
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
	if p.dec.PeekKind() != '0' {
		return 0, false
	}
	v, err := p.dec.ReadValue()
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
