package h1serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// bufferSize is the size of a connection's read and write buffers.
const bufferSize = 4 << 10

// heldBodyBytes is the most of a response body held back to be framed by its length
// and sent with the head.
const heldBodyBytes = 2 << 10

// maxDrainBytes is the most of a request body the server reads and discards after the
// handler left it unread, to keep the connection; beyond, the connection is closed.
const maxDrainBytes = 256 << 10

var (
	readerPool sync.Pool // of *bufio.Reader
	writerPool sync.Pool // of *bufio.Writer
)

// errHeadTooLarge reports a request head beyond the server's budget.
var errHeadTooLarge = errors.New("request head too large")

// conn is one client connection.
//
// Synchronisation model: the goroutine running serve owns every field but idle (read by
// Shutdown) and those of its watch, which document their own.
type conn struct {
	srv    *Server
	nc     net.Conn
	src    source
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	base   context.Context
	// idle is set while the connection waits for a request's first byte.
	idle  atomic.Bool
	watch watch
	// scratch holds the body of a response until it is framed, and the sorted names of
	// its header.
	scratch []byte
	names   []string
	// num holds a number being written: a status, a length, a chunk's size.
	num [20]byte
	// lastPOST is set after a POST, whose client may add a stray CRLF (RFC 9112 §2.2).
	lastPOST bool
}

// newConn returns a connection of s over nc.
func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String(), scratch: make([]byte, 0, heldBodyBytes)}
	c.src.nc = nc
	c.base = context.WithValue(context.Background(), http.LocalAddrContextKey, nc.LocalAddr())
	if s.HTTP2 != nil {
		c.base = context.WithValue(c.base, http.ServerContextKey, s.HTTP2)
	}
	c.watch.c = c
	c.idle.Store(true)
	return c
}

// source is what a connection's bufio.Reader reads: the connection, held to a budget
// while a request head is read, after the byte the watch read, if any.
type source struct {
	nc      net.Conn
	limited bool
	budget  int64
	// pending is a byte the watch read (guarded by watch.mu until the watch ends).
	pending    byte
	hasPending bool
}

// Read implements io.Reader.
func (r *source) Read(p []byte) (int, error) {
	if r.limited {
		if r.budget <= 0 {
			return 0, errHeadTooLarge
		}
		p = p[:min(int64(len(p)), r.budget)]
	}
	if r.hasPending && len(p) > 0 {
		p[0], r.hasPending = r.pending, false
		r.budget--
		return 1, nil
	}
	n, err := r.nc.Read(p)
	r.budget -= int64(n)
	return n, err
}

// serve serves the connection's requests until it closes, is hijacked or is handed off.
func (c *conn) serve() {
	owned := true // false once the connection belongs to a handler or the HTTP/2 server
	defer func() {
		c.srv.forget(c)
		c.release()
		if owned {
			_ = c.nc.Close()
		}
	}()
	c.br = getReader(&c.src)
	c.bw = getWriter(c.nc)
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.readHeaderTimeout()))
	_, err := c.br.Peek(1) // idle until the client sends (see Server.Shutdown)
	c.idle.Store(false)
	if err != nil || c.srv.closing.Load() {
		return
	}
	if c.http2() {
		if h2 := c.srv.handoff(true); h2 != nil {
			owned = false
			h2.pass(c.nc, c.br)
			c.br = nil
			return
		}
		c.refuse(http.StatusHTTPVersionNotSupported, "HTTP/2 is not served here")
		return
	}
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.readHeaderTimeout()))
		req, err := c.readRequest()
		if err != nil {
			c.refuseError(err)
			return
		}
		switch c.serveRequest(req) {
		case closeConn:
			return
		case closeUnread:
			c.linger()
			return
		case hijacked:
			owned = false
			return
		}
		if c.srv.closing.Load() {
			return
		}
		if c.br.Buffered() == 0 {
			c.idle.Store(true)
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.idleTimeout()))
			_, err := c.br.Peek(1)
			c.idle.Store(false)
			if err != nil || c.srv.closing.Load() {
				return
			}
		}
	}
}

// http2 reports whether the connection opens with HTTP/2's preface; it reads no further
// than a request line would differ from it.
func (c *conn) http2() bool {
	for _, n := range []int{3, len(preface)} {
		got, err := c.br.Peek(n)
		if err != nil || string(got) != preface[:n] {
			return false
		}
	}
	return true
}

// readRequest reads the next request's head, within the head budget: a common one
// itself (readCommonRequest), any other with net/http.
func (c *conn) readRequest() (*http.Request, error) {
	if c.lastPOST {
		peek, _ := c.br.Peek(min(c.br.Buffered(), 2))
		for _, b := range peek {
			if b != '\r' && b != '\n' {
				break
			}
			_, _ = c.br.Discard(1)
		}
	}
	c.src.limited, c.src.budget = true, c.srv.headBudget()-int64(c.br.Buffered())
	req, common := readCommonRequest(c.br)
	var err error
	if !common {
		req, err = http.ReadRequest(c.br)
	}
	over := c.src.budget <= 0
	c.src.limited = false
	switch {
	case err != nil && over:
		return nil, errHeadTooLarge
	case err != nil:
		return nil, err
	case req.ProtoMajor != 1:
		return nil, statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	case req.Host == "" && req.ProtoAtLeast(1, 1) && req.Method != http.MethodConnect:
		return nil, statusError{http.StatusBadRequest, "missing required Host header"}
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return nil, statusError{http.StatusBadRequest, "malformed Host header"}
	}
	if !common { // a common request's fields were checked as they were parsed
		if err := checkFields(req.Header); err != nil {
			return nil, err
		}
	}
	c.lastPOST = req.Method == http.MethodPost
	_ = c.nc.SetReadDeadline(time.Time{})
	req.RemoteAddr = c.remote
	return req, nil
}

// checkFields refuses a header that net/http read although it is not valid HTTP/1.1.
func checkFields(h http.Header) error {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return statusError{http.StatusBadRequest, "invalid header name"}
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return statusError{http.StatusBadRequest, "invalid header value"}
			}
		}
	}
	return nil
}

// statusError is a request the server answers itself with a status and a reason.
type statusError struct {
	code   int
	reason string
}

func (e statusError) Error() string { return e.reason }

// refuseError answers a request that could not be read, as net/http does, or closes the
// connection when there is nobody to answer (the client left, or timed out).
func (c *conn) refuseError(err error) {
	var se statusError
	var oe *net.OpError
	switch {
	case errors.As(err, &se):
		c.refuse(se.code, se.reason)
	case errors.Is(err, errHeadTooLarge):
		c.refuse(http.StatusRequestHeaderFieldsTooLarge, "")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &oe):
		// nobody to answer: the client left, or the connection failed or timed out
	case strings.Contains(err.Error(), "unsupported transfer encoding"):
		c.refuse(http.StatusNotImplemented, "unsupported transfer encoding")
	default:
		c.refuse(http.StatusBadRequest, err.Error())
	}
}

// refuse answers status with a plain-text reason, as net/http answers requests it cannot
// read, and ends the connection: it stops writing, then reads what the client still
// sends, for a moment, so that closing does not reset the connection before the client
// has read the answer.
func (c *conn) refuse(code int, reason string) {
	text := fmt.Sprintf("%d %s", code, http.StatusText(code))
	if reason != "" {
		text += ": " + reason
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%s", code, http.StatusText(code), text)
	if c.bw.Flush() == nil {
		c.linger()
	}
}

// linger ends a connection whose client may still be sending (a request body the
// server did not read): it stops writing, then reads and discards what arrives for up to
// rstAvoidanceDelay or until the client closes. Closing with unread bytes would reset
// the connection, and the client could lose the answer before reading it.
func (c *conn) linger() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(rstAvoidanceDelay))
		_, _ = io.Copy(io.Discard, c.nc)
	}
}

// rstAvoidanceDelay is how long linger reads, as net/http waits.
const rstAvoidanceDelay = 500 * time.Millisecond

// outcome is what happened to the connection during a request.
type outcome int

const (
	keepAlive outcome = iota
	closeConn
	closeUnread // close, with some of the request body unread (see linger)
	hijacked
)

// serveRequest runs the handler for req and completes its response.
func (c *conn) serveRequest(req *http.Request) outcome {
	ctx, cancel := context.WithCancel(c.base)
	defer cancel()
	req = req.WithContext(ctx)
	w := &response{c: c, req: req, header: make(http.Header), declared: -1, cancel: cancel}
	w.reqBody = req.Body
	// The expectation is the server's to meet, as net/http meets it: a handler does not
	// see it, and a proxy does not pass it on.
	if expect := req.Header.Get("Expect"); expect != "" {
		if !strings.EqualFold(expect, "100-continue") {
			w.header.Set("Connection", "close")
			w.WriteHeader(http.StatusExpectationFailed)
			w.finish()
			return w.outcome()
		}
		w.expectContinue = req.ProtoAtLeast(1, 1) && req.ContentLength != 0
		req.Header.Del("Expect")
	}
	c.watch.begin(w)
	if req.Body != http.NoBody {
		w.body = body{ReadCloser: req.Body, w: w}
		req.Body = &w.body
	} else {
		c.watch.arm(w)
	}
	returned := c.handle(w)
	w.body.ended.Store(true)
	c.watch.stop() // before anything else reads the connection
	if !returned {
		return closeConn
	}
	if w.hijacked {
		return hijacked
	}
	w.finish()
	return w.outcome()
}

// handle runs the handler and reports whether it returned; a handler that panicked
// (other than with http.ErrAbortHandler) is logged.
func (c *conn) handle(w *response) (ok bool) {
	defer func() {
		if ok {
			return
		}
		if err := recover(); err != nil && err != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.srv.logf("h1serve: panic serving %v: %v\n%s", c.remote, err, buf)
		}
	}()
	c.srv.Handler.ServeHTTP(w, w.req)
	return true
}

// release returns the connection's buffers to their pools, unless handed over.
func (c *conn) release() {
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
	if c.bw != nil {
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.bw = nil
	}
}

// getReader returns a pooled reader of r.
func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, bufferSize)
}

// getWriter returns a pooled writer to w.
func getWriter(w io.Writer) *bufio.Writer {
	if bw, ok := writerPool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, bufferSize)
}
