// Package h1resp reads HTTP/1.1 responses the way http.ReadResponse does, at a fraction
// of its cost for the answers engines give most: a head that has arrived whole, and a
// Content-Length or chunked body. The head is parsed in place, its names and values share
// one string, and the header's values one slice. Any other response, and any head that
// is not plainly valid, is left to http.ReadResponse untouched, so the result is always
// the one net/http gives.
package h1resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// ReadResponse reads a response to req (nil for a GET) from br, as http.ReadResponse
// does. The response's body reads from br; the caller reads it to its end and closes it
// before reading another response from br.
func ReadResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if head, ok := peekHead(br); ok {
		if resp, ok := parseHead(head, req); ok {
			_, _ = br.Discard(len(head))
			return withBody(resp, br), nil
		}
	}
	return http.ReadResponse(br, req)
}

// peekHead returns the response head at the start of br, up to and including the empty
// line that ends it, without consuming it. It reads no further than http.ReadResponse
// would: false when the head does not end in CRLF CRLF (net/http also takes bare line
// feeds), is larger than br's buffer, or reading fails (http.ReadResponse then reports
// the failure).
func peekHead(br *bufio.Reader) ([]byte, bool) {
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

// parseHead parses head, a whole response head, and returns the response without its
// body when it is one the fast path takes: HTTP/1.1, a final status other than 204 and
// 304, to a request other than HEAD, framed as framed accepts, and every line plainly
// valid.
func parseHead(head []byte, req *http.Request) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	text := string(head[:len(head)-len("\r\n\r\n")]) // every name and value is a part of it
	line, rest, _ := strings.Cut(text, "\r\n")
	status, ok := strings.CutPrefix(line, "HTTP/1.1 ")
	if !ok || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	if strings.ContainsAny(status, "\r\n") { // a lone CR or LF in the reason phrase
		return nil, false
	}
	resp := &http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Request: req, ContentLength: -1,
	}
	if resp.Header, ok = parseFields(rest); !ok {
		return nil, false
	}
	return resp, framed(resp)
}

// parseFields parses the header field lines of text, each ending in CRLF but the last.
func parseFields(text string) (http.Header, bool) {
	if text == "" {
		return http.Header{}, true
	}
	lines := strings.Count(text, "\r\n") + 1
	h := make(http.Header, lines)
	values := make([]string, lines) // one slice for the values of every field
	for line := range strings.SplitSeq(text, "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return nil, false // obs-fold lines, spaces before the colon, bare CR or LF
		}
		value = strings.Trim(value, " \t")
		if !httpguts.ValidHeaderFieldValue(value) {
			return nil, false
		}
		key := canonicalKey(name)
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

// canonicalKey returns textproto.CanonicalMIMEHeaderKey(name), without a copy when name
// is canonical already, as answers write most names.
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

// framed sets resp's ContentLength, TransferEncoding and Close from its header as
// net/http does, and reports whether the body is framed as the fast path reads it:
// either one Content-Length or Transfer-Encoding chunked (without Content-Length), no
// Trailer declared, and a Connection header of close or keep-alive, if any.
func framed(resp *http.Response) bool {
	h := resp.Header
	for _, name := range []string{"Trailer", "Pragma"} { // Pragma: no-cache adds a Cache-Control
		if _, ok := h[name]; ok {
			return false
		}
	}
	switch te, cl := h["Transfer-Encoding"], h["Content-Length"]; {
	case len(te) == 1 && len(cl) == 0 && strings.EqualFold(te[0], "chunked"):
		resp.TransferEncoding = []string{"chunked"}
		delete(h, "Transfer-Encoding") // as net/http does
	case len(te) > 0 || len(cl) != 1 || cl[0] == "" || len(cl[0]) > 18 || strings.Trim(cl[0], "0123456789") != "":
		return false
	default:
		resp.ContentLength, _ = strconv.ParseInt(cl[0], 10, 64)
	}
	switch conn := h["Connection"]; {
	case len(conn) == 0:
	case len(conn) > 1:
		return false
	case strings.EqualFold(conn[0], "close"):
		resp.Close = true
		delete(h, "Connection") // as net/http does
	case !strings.EqualFold(conn[0], "keep-alive"):
		return false
	}
	return true
}

// withBody sets resp's body: ContentLength bytes of br, or the chunks that follow.
func withBody(resp *http.Response, br *bufio.Reader) *http.Response {
	switch {
	case resp.TransferEncoding != nil:
		resp.Body = &chunkedBody{resp: resp, br: br, chunks: httputil.NewChunkedReader(br)}
	case resp.ContentLength == 0:
		resp.Body = http.NoBody
	default:
		resp.Body = &body{r: br, left: resp.ContentLength}
	}
	return resp
}

// chunkedBody is a chunked response body, and the trailer after its last chunk, which
// it reads into resp.Trailer as net/http does.
type chunkedBody struct {
	resp   *http.Response
	br     *bufio.Reader
	chunks io.Reader
	// err is what every further Read returns: io.EOF once the trailer was read, and
	// http.ErrBodyReadAfterClose after a failure to read it.
	err error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.chunks.Read(p)
	if err != io.EOF {
		return n, err
	}
	if err := readTrailer(b.br, b.resp); err != nil {
		b.err = http.ErrBodyReadAfterClose
		return n, err
	}
	b.err = io.EOF
	return n, io.EOF
}

// Close does nothing; see body.Close.
func (b *chunkedBody) Close() error { return nil }

// errTrailerEOF is net/http's failure of a trailer cut short.
var errTrailerEOF = errors.New("http: unexpected EOF reading trailer")

// readTrailer reads the trailer after the last chunk of resp's body, as net/http does:
// the empty line alone, most often; else fields, merged into resp.Trailer, within br's
// buffer.
func readTrailer(br *bufio.Reader, resp *http.Response) error {
	buf, err := br.Peek(2)
	switch {
	case string(buf) == "\r\n":
		_, _ = br.Discard(2)
		return nil
	case len(buf) < 2:
		return errTrailerEOF
	case err != nil:
		return err
	}
	for n := 4; ; n++ { // the end of the trailer must be in the buffer
		buf, err := br.Peek(n)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			break
		}
		if err != nil {
			return errors.New("http: suspiciously long trailer after chunked body")
		}
	}
	fields, err := textproto.NewReader(br).ReadMIMEHeader()
	switch {
	case err == io.EOF:
		return errTrailerEOF
	case err != nil:
		return err
	case resp.Trailer == nil:
		resp.Trailer = http.Header(fields)
	default:
		maps.Copy(resp.Trailer, http.Header(fields))
	}
	return nil
}

// body is a response body of known length.
type body struct {
	r    *bufio.Reader
	left int64
}

func (b *body) Read(p []byte) (int, error) {
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
func (b *body) Close() error { return nil }
