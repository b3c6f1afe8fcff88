package openai

import (
	"bytes"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// parseFast is ParseRequest in a single pass over the body with scanner, a streaming
// tokenizer: it decodes the fields ParseRequest reads and flattens the prompt into one
// buffer as it goes, or only counts its bytes when text is false, skipping every other
// value. Duplicate object names are accepted, as encoding/json accepts them, but not
// among the fields parseFast reads. Invalid UTF-8, which encoding/json accepts, is an
// error of scanner: parseFast gives up on it, and in exchange copies the runs of its
// strings without checking them again.
//
// It handles the valid bodies clients send and gives up (ok is false) on everything
// else: any syntax error or error ParseRequest reports, and valid but unusual bodies
// whose decoding by encoding/json is subtle: duplicate keys among the fields read, keys
// that are not ASCII or match a field only case-insensitively, and strings of invalid
// UTF-8 or with unpaired surrogate escapes. When ok is true, the result is the one
// parseRequestJSON returns, with PromptLen set, and without the prompt's text when text
// is false; FuzzParseFast checks that.
func parseFast(data []byte, text bool) (req Request, ok bool) {
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
		out                          = textBuf{countOnly: !text} // the prompt
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
			p.model.reset()
			ok = p.quoted(&p.model)
			req.Model = string(p.model.b)
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
			out.grow(len(data) - p.pos)
			ok = p.messages(&out)
		case field == seenPrompt && (k == '"' || k == '['):
			hasPrompt = true
			out.grow(len(data) - p.pos)
			ok = p.prompt(&out)
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
	req.Prompt = unsafe.String(unsafe.SliceData(out.b), len(out.b))
	req.PromptLen = out.n
	return req, true
}

// textBuf is where a decoded string goes: its bytes, or, when countOnly, just its
// length, so that a prompt whose text is not wanted is measured without being copied.
type textBuf struct {
	b []byte
	// n is the length of the text written, also when countOnly.
	n         int
	countOnly bool
}

// grow makes room for n more bytes, unless t only counts.
func (t *textBuf) grow(n int) {
	if !t.countOnly {
		t.b = slices.Grow(t.b, n)
	}
}

// write appends b.
func (t *textBuf) write(b []byte) {
	t.n += len(b)
	if !t.countOnly {
		t.b = append(t.b, b...)
	}
}

// writeByte appends c.
func (t *textBuf) writeByte(c byte) {
	t.n++
	if !t.countOnly {
		t.b = append(t.b, c)
	}
}

// writeRune appends the UTF-8 encoding of r.
func (t *textBuf) writeRune(r rune) {
	if r < utf8.RuneSelf {
		t.writeByte(byte(r))
		return
	}
	t.n += utf8.RuneLen(r)
	if !t.countOnly {
		t.b = utf8.AppendRune(t.b, r)
	}
}

// insert writes b at offset at, before what was written since (if anything).
func (t *textBuf) insert(at int, b []byte) {
	t.n += len(b)
	if !t.countOnly {
		t.b = slices.Insert(t.b, at, b...)
	}
}

// truncate forgets what was written after the first n bytes.
func (t *textBuf) truncate(n int) {
	t.n = n
	if !t.countOnly {
		t.b = t.b[:n]
	}
}

// reset empties t, keeping its buffer.
func (t *textBuf) reset() {
	t.b, t.n = t.b[:0], 0
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
	// keyText holds the last decoded object key, model the model, role a message's role
	// until it is inserted, and partType the "type" of a content part.
	keyText, model, role, partType textBuf
}

// fastParsers hold the idle parsers (*fastParser).
var fastParsers = sync.Pool{New: func() any { return new(fastParser) }}

// maxPooledNesting is the capacity of the largest stack of open containers kept with a
// parser, and maxPooledTextBytes that of the largest of its text buffers: a key or a
// role is rarely longer.
const (
	maxPooledNesting   = 64
	maxPooledTextBytes = 4 << 10
)

// release forgets the body, so that the pool does not keep it alive, and returns the
// parser to fastParsers.
func (p *fastParser) release() {
	p.reset(nil)
	if cap(p.open) > maxPooledNesting {
		p.open = nil
	}
	for _, t := range []*textBuf{&p.keyText, &p.model, &p.role, &p.partType} {
		if cap(t.b) > maxPooledTextBytes {
			t.b = nil
		}
	}
	fastParsers.Put(p)
}

// key reads an object key. It gives up on keys that are not ASCII, which encoding/json
// may match to a field under Unicode case folding (ſ and K fold to s and k).
func (p *fastParser) key() ([]byte, bool) {
	p.keyText.reset()
	if !p.quoted(&p.keyText) {
		return nil, false
	}
	for _, c := range p.keyText.b {
		if c >= utf8.RuneSelf {
			return nil, false
		}
	}
	return p.keyText.b, true
}

// messages flattens a non-empty array of messages onto out.
func (p *fastParser) messages(out *textBuf) bool {
	if !p.begin('[') || p.peekKind() == ']' { // empty: an error
		return false
	}
	for p.peekKind() != ']' {
		if !p.message(out) {
			return false
		}
	}
	return p.end()
}

// message writes role + ": " + text + "\n" for a message object. The role is inserted
// at the message's start, so that a content that comes before it is written first.
func (p *fastParser) message(out *textBuf) bool {
	if !p.begin('{') {
		return false
	}
	start := out.n
	var seenRole, seenContent bool
	for p.peekKind() != '}' {
		key, ok := p.key()
		if !ok {
			return false
		}
		switch string(key) {
		case "role":
			if seenRole {
				return false
			}
			seenRole = true
			p.role.reset()
			if ok = p.quoted(&p.role); !ok || p.role.n == 0 { // empty roles are errors
				return false
			}
			p.role.write([]byte(": "))
			out.insert(start, p.role.b) // at the end, unless the content came first
		case "content":
			if seenContent {
				return false
			}
			seenContent = true
			ok = p.content(out)
		default:
			ok = !foldsToAny(key, messageFields) && p.skip()
		}
		if !ok {
			return false
		}
	}
	if !seenRole || !p.end() {
		return false
	}
	out.writeByte('\n')
	return true
}

// content writes the text of a message content: a string, an array of content parts or
// null.
func (p *fastParser) content(out *textBuf) bool {
	switch p.peekKind() {
	case '"':
		return p.quoted(out)
	case 'n':
		return p.skip()
	case '[':
	default:
		return false
	}
	if !p.begin('[') {
		return false
	}
	for p.peekKind() != ']' {
		if !p.contentPart(out) {
			return false
		}
	}
	return p.end()
}

// contentPart writes the text of a content part of type "text".
func (p *fastParser) contentPart(out *textBuf) bool {
	if !p.begin('{') {
		return false
	}
	mark := out.n
	var seenType, seenText, isText bool
	for p.peekKind() != '}' {
		key, ok := p.key()
		if !ok {
			return false
		}
		switch string(key) {
		case "type":
			if seenType {
				return false
			}
			seenType = true
			switch p.peekKind() {
			case '"':
				p.partType.reset()
				ok = p.quoted(&p.partType)
				isText = string(p.partType.b) == "text"
			case 'n':
				ok = p.skip()
			default:
				ok = false
			}
		case "text":
			if seenText {
				return false
			}
			seenText = true
			switch p.peekKind() {
			case '"':
				ok = p.quoted(out)
			case 'n':
				ok = p.skip()
			default:
				ok = false
			}
		default:
			ok = !foldsToAny(key, partFields) && p.skip()
		}
		if !ok {
			return false
		}
	}
	if !isText { // the text, if any, was written before the type was known
		out.truncate(mark)
	}
	return p.end()
}

// prompt writes a completion prompt: a string or a non-empty array of strings.
func (p *fastParser) prompt(out *textBuf) bool {
	if p.peekKind() == '"' {
		return p.quoted(out)
	}
	if !p.begin('[') || p.peekKind() == ']' { // empty: an error
		return false
	}
	for p.peekKind() != ']' {
		if !p.quoted(out) {
			return false
		}
	}
	return p.end()
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
