package h1serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of one request. A body the handler writes before
// flushing is held in the connection's scratch buffer, so that a response which fits in
// it goes out with its head, framed by Content-Length, in one write; a longer or flushed
// body is sent chunked (HTTP/1.1) or until the connection closes (HTTP/1.0).
//
// Synchronisation model: the handler's goroutine calls every method, as with net/http;
// the request body (body) may be read from another goroutine, and the only thing it
// writes, an interim 100 Continue, happens under mu and only before committed is set.
type response struct {
	c       *conn
	req     *http.Request
	reqBody io.ReadCloser // the body as read, whatever the handler sets Request.Body to
	body    body
	header  http.Header
	cancel  context.CancelFunc

	status      int
	wroteHeader bool
	declared    int64 // the Content-Length the handler set, -1 when none
	written     int64 // the body bytes the handler wrote

	// expectContinue is set before the handler runs: the client waits for a 100
	// Continue before it sends the body.
	expectContinue bool
	// mu guards the connection's writer until the head is written, and these.
	mu           sync.Mutex
	committed    bool // the head is written (or being written)
	sentContinue bool

	chunked    bool
	closeAfter bool // the connection closes after the response
	broken     bool // the connection can no longer frame another response
	hijacked   bool
	finished   bool
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
	_ http.Hijacker       = (*response)(nil)
)

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter. An informational status other than 101 is
// sent at once, with the header as it stands.
func (w *response) WriteHeader(code int) {
	if w.hijacked || w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.writeStatusLine(code)
		w.writeFields(w.header, nil)
		_, _ = w.c.bw.WriteString("\r\n")
		w.flushOrBreak()
		return
	}
	w.status, w.wroteHeader = code, true
	if cl := w.header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.declared = n
		} else {
			w.c.srv.logf("h1serve: invalid Content-Length %q", cl)
			w.header.Del("Content-Length")
		}
	}
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	if !w.committed {
		if len(w.c.scratch)+len(p) <= cap(w.c.scratch) {
			w.c.scratch = append(w.c.scratch, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	if w.broken {
		return 0, errBroken
	}
	w.writeBody(p)
	if w.broken {
		return 0, errBroken
	}
	return len(p), nil
}

// errBroken reports a write to a connection that failed.
var errBroken = errors.New("h1serve: the client connection failed")

// Flush implements http.Flusher.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError flushes what was written to the client, as http.ResponseController's Flush
// asks; it returns the write's failure.
func (w *response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	w.flushOrBreak()
	if w.broken {
		return errBroken
	}
	return nil
}

// SetReadDeadline sets the connection's read deadline, for http.ResponseController.
func (w *response) SetReadDeadline(t time.Time) error { return w.c.nc.SetReadDeadline(t) }

// SetWriteDeadline sets the connection's write deadline, for http.ResponseController.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// Hijack implements http.Hijacker: the connection and its buffers become the caller's,
// with what the handler wrote so far flushed.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	w.c.watch.stop()
	if w.committed {
		w.flushOrBreak()
	}
	w.hijacked = true
	rw := bufio.NewReadWriter(w.c.br, w.c.bw)
	w.c.br, w.c.bw = nil, nil // no longer pooled
	_ = w.c.nc.SetDeadline(time.Time{})
	return w.c.nc, rw, nil
}

// finish completes the response after the handler returned.
func (w *response) finish() {
	if w.finished || w.hijacked {
		return
	}
	w.finished = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		// As net/http does, read what the handler left of the request body before the
		// head goes out, so that the head can say whether the connection stays open.
		if w.mayKeepAlive() && !w.drain() {
			w.closeAfter = true
		}
		w.commit(true)
	}
	if w.chunked {
		_, _ = w.c.bw.WriteString("0\r\n")
		w.writeTrailers()
		_, _ = w.c.bw.WriteString("\r\n")
	}
	w.flushOrBreak()
	if w.declared >= 0 && w.written < w.declared && w.req.Method != http.MethodHead && bodyAllowed(w.status) {
		w.broken = true // the client waits for bytes that will not come
	}
}

// bodyRead reports whether the request had no body or it was read to its end.
func (w *response) bodyRead() bool { return w.reqBody == http.NoBody || w.body.eof.Load() }

// drain reads what is left of the request body, so that the connection can carry the
// next request; it reports false when the connection must close instead, at once when a
// read of the body failed (its end can no longer be found in time).
func (w *response) drain() bool {
	if w.bodyRead() {
		return true
	}
	if w.body.failed.Load() {
		return false
	}
	w.mu.Lock()
	waiting := w.expectContinue && !w.sentContinue
	w.mu.Unlock()
	if waiting {
		return false // the client waits for a 100 Continue that will not come
	}
	_ = w.c.nc.SetReadDeadline(time.Now().Add(w.c.srv.readHeaderTimeout()))
	_, err := io.CopyN(io.Discard, w.reqBody, maxDrainBytes+1)
	if !errors.Is(err, io.EOF) {
		return false
	}
	w.body.eof.Store(true)
	return true
}

// outcome is what becomes of the connection once the response is finished: it closes
// when it failed or the response said so, lingering while a body is left unread, and
// otherwise carries the next request once the rest of the body is read.
func (w *response) outcome() outcome {
	switch {
	case w.broken:
		return closeConn
	case w.closeAfter && w.bodyRead():
		return closeConn
	case w.closeAfter || !w.drain():
		return closeUnread
	}
	return keepAlive
}

// mayKeepAlive reports whether nothing yet closes the connection after the response.
func (w *response) mayKeepAlive() bool {
	return !w.req.Close && !w.closeAfter && !w.c.srv.closing.Load() &&
		!httpguts.HeaderValuesContainsToken(w.header["Connection"], "close")
}

// commit frames the response and writes its head, followed by the body held so far.
// final is set when the handler has returned, so that the held body is all of it.
func (w *response) commit(final bool) {
	w.mu.Lock()
	w.committed = true // from here on, the body's reader leaves the connection's writer alone
	w.mu.Unlock()
	h := w.header
	trailers := hasTrailers(h)
	if _, ok := h["Transfer-Encoding"]; ok { // the server frames the body, by length or not
		h.Del("Transfer-Encoding")
		h.Del("Content-Length")
		w.declared = -1
	}
	addLength := false // the server frames the body by the length it holds
	switch {
	case w.status == http.StatusNotModified:
		h.Del("Content-Type")
		h.Del("Content-Length")
	case !bodyAllowed(w.status):
		h.Del("Content-Length")
	case w.declared >= 0:
	case final && !trailers && (w.req.Method != http.MethodHead || w.written > 0):
		addLength, w.declared = true, w.written
	case w.req.Method == http.MethodHead:
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
	default:
		w.closeAfter = true // HTTP/1.0: the body ends with the connection
	}
	connection := "" // the Connection field the server sets, in place of the handler's
	switch {
	case w.req.Close || w.c.srv.closing.Load() || w.closeAfter:
		w.closeAfter, connection = true, "close"
	case httpguts.HeaderValuesContainsToken(h["Connection"], "close"):
		w.closeAfter = true
	case !w.req.ProtoAtLeast(1, 1) && w.declared >= 0: // an HTTP/1.0 client that asked to keep alive
		connection = "keep-alive"
	}
	if connection != "" {
		h.Del("Connection")
	}
	bw := w.c.bw
	w.writeStatusLine(w.status)
	w.writeFields(h, date())
	if addLength {
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(w.c.num[:0], w.written, 10))
		_, _ = bw.WriteString("\r\n")
	}
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if connection != "" {
		_, _ = bw.WriteString("Connection: ")
		_, _ = bw.WriteString(connection)
		_, _ = bw.WriteString("\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	held := w.c.scratch
	w.c.scratch = w.c.scratch[:0]
	if len(held) > 0 {
		w.writeBody(held)
	}
}

// writeBody writes p as body bytes, in a chunk when the body is chunked.
func (w *response) writeBody(p []byte) {
	bw := w.c.bw
	var err error
	if w.chunked {
		_, _ = bw.Write(strconv.AppendInt(w.c.num[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(p)
		_, err = bw.WriteString("\r\n")
	} else {
		_, err = bw.Write(p)
	}
	if err != nil {
		w.breakConn()
	}
}

// flushOrBreak flushes the connection's buffer; a failure breaks the connection and
// cancels the request, as a client that left does.
func (w *response) flushOrBreak() {
	if err := w.c.bw.Flush(); err != nil {
		w.breakConn()
	}
}

// breakConn marks the connection failed and cancels the request.
func (w *response) breakConn() {
	if !w.broken {
		w.broken = true
		w.cancel()
	}
}

// writeStatusLine writes the status line of code.
func (w *response) writeStatusLine(code int) {
	bw := w.c.bw
	_, _ = bw.WriteString("HTTP/1.1 ")
	_, _ = bw.Write(strconv.AppendInt(w.c.num[:0], int64(code), 10))
	_ = bw.WriteByte(' ')
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	_, _ = bw.WriteString(text)
	_, _ = bw.WriteString("\r\n")
}

// writeFields writes the fields of h sorted by name, as net/http does: names that are
// not valid field names and trailers (http.TrailerPrefix) are left out, and line breaks
// in values become spaces. dateValue is written as the Date field when h has none.
func (w *response) writeFields(h http.Header, dateValue []byte) {
	bw := w.c.bw
	names := w.c.names[:0]
	for name := range h {
		if httpguts.ValidHeaderFieldName(name) && !strings.HasPrefix(name, http.TrailerPrefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	w.c.names = names[:0]
	if dateValue != nil && h["Date"] == nil {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(dateValue)
		_, _ = bw.WriteString("\r\n")
	}
	for _, name := range names {
		writeField(bw, name, h[name])
	}
}

// writeField writes the lines of a field with values vs.
func writeField(bw *bufio.Writer, name string, vs []string) {
	for _, v := range vs {
		if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
			v = lineBreaksToSpaces.Replace(v)
		}
		_, _ = bw.WriteString(name)
		_, _ = bw.WriteString(": ")
		_, _ = bw.WriteString(strings.TrimSpace(v))
		_, _ = bw.WriteString("\r\n")
	}
}

// lineBreaksToSpaces makes a field value one line.
var lineBreaksToSpaces = strings.NewReplacer("\r", " ", "\n", " ")

// writeTrailers writes the trailer fields of a chunked body: those the Trailer field
// declared, and those named with http.TrailerPrefix.
func (w *response) writeTrailers() {
	h := w.header
	for _, declared := range h["Trailer"] {
		for name := range strings.SplitSeq(declared, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if vs := h[name]; len(vs) > 0 && httpguts.ValidTrailerHeader(name) {
				writeField(w.c.bw, name, vs)
			}
		}
	}
	for name, vs := range h {
		if trailer, ok := strings.CutPrefix(name, http.TrailerPrefix); ok && httpguts.ValidTrailerHeader(trailer) {
			writeField(w.c.bw, http.CanonicalHeaderKey(trailer), vs)
		}
	}
}

// hasTrailers reports whether h declares trailers or holds some.
func hasTrailers(h http.Header) bool {
	if len(h["Trailer"]) > 0 {
		return true
	}
	for name := range h {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// bodyAllowed reports whether a response of status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// body is the request body the handler reads: it sends the interim 100 Continue the
// client expects before the first read, starts the connection's watch once the body has
// been read to its end, and fails reads once the handler has returned.
type body struct {
	io.ReadCloser
	w      *response
	eof    atomic.Bool
	failed atomic.Bool // a read failed (a deadline, a broken connection, bad framing)
	// ended is set when the handler has returned: from then on the connection's reader
	// is the server's, and reads fail as they do once net/http closed a body.
	ended atomic.Bool
}

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	if b.ended.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	w := b.w
	if w.expectContinue {
		w.sendContinue()
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case err == io.EOF:
		if !b.eof.Swap(true) {
			w.c.watch.arm(w)
		}
	default:
		b.failed.Store(true)
	}
	return n, err
}

// sendContinue sends the interim 100 Continue, unless it was sent or the response has
// begun.
func (w *response) sendContinue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sentContinue && !w.committed {
		w.sentContinue = true
		_, _ = w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		_ = w.c.bw.Flush() // a failure fails the read that follows
	}
}

// Close implements io.Closer. It does not close the connection's reader: the server
// reads what is left of the body after the handler, or closes the connection.
func (b *body) Close() error { return nil }

// date returns the current time as a Date field value, formatted once a second.
func date() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := cachedDate.Load(); d != nil && d.sec == sec {
		return d.value
	}
	d := &formattedDate{sec: sec, value: now.UTC().AppendFormat(nil, http.TimeFormat)}
	cachedDate.Store(d)
	return d.value
}

// formattedDate is a Date field value and the second it names.
type formattedDate struct {
	sec   int64
	value []byte
}

var cachedDate atomic.Pointer[formattedDate]
