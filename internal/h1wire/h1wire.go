// Package h1wire reads what HTTP/1.1 requests and responses share on the wire, for the
// fast paths of the gateway's client (package h1resp) and server (package h1serve): the
// head of a message that has arrived whole at the start of a buffered reader, its header
// field lines parsed in place, and a body of known length. It parses only what is plainly
// valid and reports false otherwise, so that its callers leave every other message to
// net/http, whose result is then the one they give.
package h1wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// PeekHead returns the head at the start of br, up to and including the empty line that
// ends it, without consuming it. It reads no further than net/http would to read the
// head: false when the head does not end in CRLF CRLF (net/http also takes bare line
// feeds), is larger than br's buffer, or reading fails (net/http then reports the
// failure).
func PeekHead(br *bufio.Reader) ([]byte, bool) {
	n := max(br.Buffered(), 1)
	for {
		buf, err := br.Peek(n)
		if end, found := headLength(buf); found {
			return buf[:end], end > 0
		}
		if err != nil || n == br.Size() {
			return nil, false
		}
		n = min(max(br.Buffered(), n+1), br.Size()) // wait for more
	}
}

// headLength returns the length of the head at the start of buf, ending at the first
// empty line as net/http reads lines (LF, or CRLF), and whether buf holds that line; 0
// when the head ends otherwise than in CRLF CRLF.
func headLength(buf []byte) (int, bool) {
	for from := 0; ; {
		i := bytes.IndexByte(buf[from:], '\n')
		if i < 0 {
			return 0, false
		}
		i += from // a line ends at buf[i]; is the next one empty?
		switch {
		case i+1 == len(buf) || buf[i+1] == '\r' && i+2 == len(buf):
			return 0, false // not known yet
		case buf[i+1] == '\n':
			return 0, true
		case buf[i+1] == '\r' && buf[i+2] == '\n':
			if i == 0 || buf[i-1] != '\r' {
				return 0, true
			}
			return i + 3, true
		}
		from = i + 1
	}
}

// ParseFields parses the header field lines of text, each ending in CRLF but the last,
// as textproto.Reader.ReadMIMEHeader does: names canonical, values trimmed of blanks,
// repeated fields' values in order. Names and values are parts of text, and the values
// of every field share one slice. It reports false for any line that is not plainly
// valid: a line without a colon, an obsolete folded line, a name with blanks or other
// bytes a token does not have, a value with control bytes.
func ParseFields(text string) (http.Header, bool) {
	if text == "" {
		return http.Header{}, true
	}
	lines := strings.Count(text, "\r\n") + 1
	h := make(http.Header, lines)
	values := make([]string, lines)
	for more := true; more; {
		line := text
		if i := strings.IndexByte(text, '\n'); i < 0 {
			more = false
		} else if i > 0 && text[i-1] == '\r' {
			line, text = text[:i-1], text[i+1:]
		} else {
			return nil, false // a bare line feed
		}
		colon := strings.IndexByte(line, ':')
		if colon < 0 || !httpguts.ValidHeaderFieldName(line[:colon]) {
			return nil, false
		}
		value := trimBlanks(line[colon+1:])
		if !httpguts.ValidHeaderFieldValue(value) {
			return nil, false
		}
		key := canonicalKey(line[:colon])
		if vs, seen := h[key]; seen {
			h[key] = append(vs, value)
			continue
		}
		values[0] = value
		h[key] = values[:1:1]
		values = values[1:]
	}
	return h, true
}

// trimBlanks returns s without leading and trailing spaces and tabs.
func trimBlanks(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// canonicalKey returns textproto.CanonicalMIMEHeaderKey(name), without a copy when name
// is canonical already, as most clients and engines write names.
func canonicalKey(name string) string {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return textproto.CanonicalMIMEHeaderKey(name)
		}
		upper = c == '-'
	}
	return name
}

// ContentLength returns the length that a message's Content-Length values declare when
// they are one value of 1 to 18 digits, which net/http reads as it is; false for any
// other, which net/http is left to read or refuse.
func ContentLength(values []string) (int64, bool) {
	if len(values) != 1 || values[0] == "" || len(values[0]) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range []byte(values[0]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// Body is a message body of known length, read from a buffered reader that the caller
// owns.
type Body struct {
	r    *bufio.Reader
	left int64
}

// NewBody returns the body of n bytes that br reads next; n > 0.
func NewBody(br *bufio.Reader, n int64) *Body { return &Body{r: br, left: n} }

// Read reads the body, ending in io.EOF at its length, as net/http's bodies do, and in
// io.ErrUnexpectedEOF when the reader ends before.
func (b *Body) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		b.left = 0 // later reads see the end, as net/http's do
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// Close does nothing, unlike net/http's, which reads the rest of the body: the reader
// is the caller's, who decides whether what is left of the body is read or the
// connection dropped. Reading after Close goes on reading the body.
func (b *Body) Close() error { return nil }
