// Package h1resp reads HTTP/1.1 responses the way http.ReadResponse does, at a fraction
// of its cost for the answers engines give most: a head that has arrived whole, and a
// Content-Length or chunked body. The head is parsed in place (package h1wire), its names
// and values share one string, and the header's values one slice. Any other response, and any head that
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

	"github.com/switchboard-llm/switchboard/internal/h1wire"
)

// ReadResponse reads a response to req (nil for a GET) from br, as http.ReadResponse
// does. The response's body reads from br; the caller reads it to its end and closes it
// before reading another response from br.
func ReadResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if head, ok := h1wire.PeekHead(br); ok {
		if resp, ok := parseHead(head, req); ok {
			_, _ = br.Discard(len(head))
			return withBody(resp, br), nil
		}
	}
	return http.ReadResponse(br, req)
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
	if resp.Header, ok = h1wire.ParseFields(rest); !ok {
		return nil, false
	}
	return resp, framed(resp)
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
	case len(te) > 0:
		return false
	default:
		n, ok := h1wire.ContentLength(cl)
		if !ok {
			return false
		}
		resp.ContentLength = n
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
		resp.Body = h1wire.NewBody(br, resp.ContentLength)
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
