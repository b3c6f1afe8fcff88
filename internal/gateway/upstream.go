package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-llm/switchboard/internal/h1resp"
	"github.com/switchboard-llm/switchboard/internal/writewait"
)

// upstreamClient sends HTTP/1.1 requests whose body is in memory or absent to engines
// and backends on pooled keep-alive connections. The goroutine of the request writes it
// and reads the answer itself: http.Transport hands every round trip to a writer and a
// reader goroutine per connection and back, and on a small answer those hand-offs cost
// more than the bytes. It does not switch protocols and speaks neither TLS nor HTTP/2;
// the gateway sends such requests, and those that stream their body, through
// http.Transport.
//
// Synchronisation model: mu guards the idle connections and the sweeper. A connection
// belongs to one goroutine at a time: the one whose round trip it carries, until the
// answer's body is closed, or else to the idle set.
type upstreamClient struct {
	dialer *net.Dialer
	// headerTimeout bounds the wait for an answer's headers; 0: no bound.
	headerTimeout time.Duration
	// idleTimeout is how long an idle connection is kept.
	idleTimeout time.Duration
	// maxIdle and maxIdlePerHost bound the idle connections, in all and per address.
	maxIdle, maxIdlePerHost int

	mu sync.Mutex
	// idle holds the idle connections by address, each list oldest first.
	idle  map[string][]*upstreamConn
	nidle int
	// sweeper closes the connections idle for longer than idleTimeout; armed while
	// there are idle connections.
	sweeper *time.Timer
	armed   bool
}

var _ http.RoundTripper = (*upstreamClient)(nil)

// upstreamReadBufferBytes is the size of a connection's read buffer.
const upstreamReadBufferBytes = 16 << 10

// upstreamConn is one keep-alive connection to an address.
type upstreamConn struct {
	client *upstreamClient
	addr   string
	conn   net.Conn
	br     *bufio.Reader
	// head is the buffer request heads are written from.
	head []byte
	// writer writes requests and waits for their answers; nil where it cannot.
	writer *writewait.Writer
	// bufs and iov write what writer did not of a head and its body, in one system
	// call; kept here so that the write allocates nothing.
	bufs [2][]byte
	iov  net.Buffers
	// idleSince is when the connection last went idle.
	idleSince time.Time
	// reused is whether the connection carried a round trip before.
	reused bool
	// probe tells, before it is reused, whether the engine closed it while it was idle.
	probe *aliveProbe
	// cutOff makes the connection's reads and writes fail from now on; made once, so
	// that a round trip does not allocate it.
	cutOff func()
	// timer cuts the connection off when it fires: while a round trip waits for the
	// answer's headers (the client's headerTimeout), and then while the relay waits for
	// more of the body (watchIdle). armed is whether it was started since it last
	// stopped; nil until first needed.
	timer *time.Timer
	armed bool
}

// newUpstreamConn returns a connection to addr over conn.
func (c *upstreamClient) newUpstreamConn(addr string, conn net.Conn) *upstreamConn {
	raw, err := rawConn(conn)
	pc := &upstreamConn{client: c, addr: addr, conn: conn, br: bufio.NewReaderSize(conn, upstreamReadBufferBytes),
		probe: newAliveProbe(raw, err), writer: writewait.New(raw)}
	pc.cutOff = func() { _ = pc.conn.SetDeadline(aLongTimeAgo) }
	return pc
}

// rawConn returns conn's file descriptor, for the alive probe and the request writer to
// reach: nil and no error when conn has none (an in-memory pipe), an error when its
// descriptor could not be had, the connection being closed.
func rawConn(conn net.Conn) (syscall.RawConn, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, nil
	}
	return sc.SyscallConn()
}

// arm starts (or restarts) the timer to cut the connection off in d.
func (pc *upstreamConn) arm(d time.Duration) {
	restart(&pc.timer, d, pc.cutOff)
	pc.armed = true
}

// restart starts *t to call f in d, making it on first use, or restarts it.
func restart(t **time.Timer, d time.Duration, f func()) {
	if *t == nil {
		*t = time.AfterFunc(d, f)
	} else {
		(*t).Reset(d)
	}
}

// disarm stops the timer and reports whether it had fired, and so cut the connection
// off, since it was last started.
func (pc *upstreamConn) disarm() (fired bool) {
	if !pc.armed {
		return false
	}
	pc.armed = false
	return !pc.timer.Stop()
}

// errStaleConn wraps a failure to write a request on a reused connection, which the
// engine may have closed while it was idle: it saw no whole request, so the request may
// be sent again on a new connection.
var errStaleConn = errors.New("write on a reused upstream connection")

// RoundTrip sends req, whose body is nil, http.NoBody or held in memory (a
// *replayableBody, which GetBody replays for a request sent again), and
// returns the answer's headers. The answer's body MUST be closed; the connection returns
// to the idle set when the body was read to its end. A failure to connect is the
// dialer's *net.OpError; a request whose context ends fails with the context's error.
func (c *upstreamClient) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := writable(req); err != nil {
		return nil, err
	}
	ctx := req.Context()
	for {
		pc, err := c.conn(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := pc.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		pc.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, errStaleConn) {
			return nil, err
		}
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("rewind request body: %w", err)
			}
		}
	}
}

// conn returns an idle connection to addr that the engine has not closed, or a new one.
func (c *upstreamClient) conn(ctx context.Context, addr string) (*upstreamConn, error) {
	for {
		c.mu.Lock()
		list := c.idle[addr]
		if len(list) == 0 {
			c.mu.Unlock()
			break
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		c.idle[addr] = list[:len(list)-1]
		c.nidle--
		c.mu.Unlock()
		if pc.br.Buffered() == 0 && pc.probe.alive() {
			return pc, nil
		}
		pc.close()
	}
	conn, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.newUpstreamConn(addr, conn), nil
}

// put returns pc to the idle set, or closes it beyond the bounds.
func (c *upstreamClient) put(pc *upstreamConn) {
	pc.idleSince = time.Now()
	pc.reused = true
	c.mu.Lock()
	if c.nidle >= c.maxIdle || len(c.idle[pc.addr]) >= c.maxIdlePerHost {
		c.mu.Unlock()
		pc.close()
		return
	}
	if c.idle == nil {
		c.idle = make(map[string][]*upstreamConn)
	}
	c.idle[pc.addr] = append(c.idle[pc.addr], pc)
	c.nidle++
	if !c.armed {
		c.armed = true
		if c.sweeper == nil {
			c.sweeper = time.AfterFunc(c.idleTimeout, c.sweep)
		} else {
			c.sweeper.Reset(c.idleTimeout)
		}
	}
	c.mu.Unlock()
}

// sweep closes the connections idle for idleTimeout or longer, and forgets the
// addresses left without idle connections, so that engines that went away leave none
// behind.
func (c *upstreamClient) sweep() {
	cutoff := time.Now().Add(-c.idleTimeout)
	var expired []*upstreamConn
	c.mu.Lock()
	for addr, list := range c.idle {
		n := 0
		for n < len(list) && !list[n].idleSince.After(cutoff) {
			n++
		}
		expired = append(expired, list[:n]...)
		if n == len(list) {
			delete(c.idle, addr)
		} else if n > 0 {
			c.idle[addr] = append(list[:0:0], list[n:]...)
		}
		c.nidle -= n
	}
	c.armed = c.nidle > 0
	if c.armed {
		c.sweeper.Reset(c.idleTimeout / 2)
	}
	c.mu.Unlock()
	for _, pc := range expired {
		pc.close()
	}
}

// CloseIdleConnections closes the idle connections.
func (c *upstreamClient) CloseIdleConnections() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.nidle = nil, 0
	c.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.close()
		}
	}
}

func (pc *upstreamConn) close() { _ = pc.conn.Close() }

// aLongTimeAgo is a deadline in the past, which makes blocked reads and writes fail.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req on pc and reads the answer's headers, within the client's
// headerTimeout. The connection's I/O fails once ctx ends, until the answer's body is
// closed.
func (pc *upstreamConn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(ctx, pc.cutOff)
	if d := pc.client.headerTimeout; d > 0 {
		pc.arm(d)
	}
	resp, err := pc.exchange(req)
	fired := pc.disarm()
	if err == nil && (fired || ctx.Err() != nil) { // cut off as the headers arrived
		_ = resp.Body.Close()
		err = errHeaderTimeout
	}
	if err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	reusable := !resp.Close && resp.ProtoAtLeast(1, 1)
	resp.Body = &upstreamBody{body: resp.Body, pc: pc, stop: stop, reusable: reusable}
	return resp, nil
}

// errHeaderTimeout is the failure of a round trip whose answer's headers did not arrive
// within the client's headerTimeout: a timeout, as a deadline's is.
var errHeaderTimeout error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// exchange writes req and reads the final answer's headers, skipping interim (1xx)
// answers.
func (pc *upstreamConn) exchange(req *http.Request) (*http.Response, error) {
	if err := pc.writeRequest(req); err != nil {
		return nil, err
	}
	for {
		resp, err := h1resp.ReadResponse(pc.br, req)
		if err != nil {
			return nil, fmt.Errorf("read upstream response: %w", err)
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("the upstream switched protocols unasked")
		case resp.StatusCode < http.StatusOK:
			continue // 100 Continue, 103 Early Hints: the final answer follows
		}
		return resp, nil
	}
}

// writable returns why req cannot be sent, before a connection is taken for it: a body
// not held in memory (the gateway sends a request that streams its body through
// http.Transport), or one of another length than declared.
func writable(req *http.Request) error {
	n := 0
	switch b := req.Body.(type) {
	case *replayableBody:
		n = b.Len()
	case nil:
	default:
		if b != http.NoBody {
			return errors.New("the upstream client sends only request bodies held in memory")
		}
	}
	if int64(n) != max(req.ContentLength, 0) {
		return fmt.Errorf("request body has %d bytes, not the %d declared", n, req.ContentLength)
	}
	return nil
}

// writeRequest writes req's head and its body, held in memory or absent (writable), in
// one writev: the engine wakes once, to the whole request. Where it can (send), it then
// waits for the answer without a read. A failed write on a reused connection is
// errStaleConn.
func (pc *upstreamConn) writeRequest(req *http.Request) error {
	var body []byte
	if rb, ok := req.Body.(*replayableBody); ok {
		body = rb.take()
	}
	head, err := appendRequestHead(pc.head[:0], req)
	if err != nil {
		return err
	}
	pc.head = head
	err = pc.send(head, body)
	if err != nil && pc.reused {
		return fmt.Errorf("%w: %w", errStaleConn, err)
	}
	return err
}

// send writes head and body on the connection and waits for the answer, where the
// connection has a writewait.Writer, and writes them the ordinary way otherwise.
func (pc *upstreamConn) send(head, body []byte) error {
	sent, err := pc.writer.WriteAndWait(head, body)
	if err != nil {
		return err
	}
	return pc.writeFrom(head, body, sent)
}

// writeFrom writes head and body, after their first done bytes, in one writev.
func (pc *upstreamConn) writeFrom(head, body []byte, done int) error {
	switch {
	case done < len(head):
		pc.bufs[0], pc.bufs[1] = head[done:], body
	case done < len(head)+len(body):
		pc.bufs[1] = body[done-len(head):]
	default:
		return nil
	}
	pc.iov = pc.bufs[:]
	_, err := pc.iov.WriteTo(pc.conn)
	pc.bufs = [2][]byte{} // the body is the exchange's buffer, not the connection's
	return err
}

// requestHeadExcluded are the header fields appendRequestHead writes itself or not at
// all.
var requestHeadExcluded = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// appendRequestHead appends req's request line and header fields to b, with its Host
// and Content-Length, as net/http writes them: values with line breaks turned to spaces
// and trimmed. An invalid field name or value is an error.
func appendRequestHead(b []byte, req *http.Request) ([]byte, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !httpguts.ValidHostHeader(host) {
		return nil, fmt.Errorf("invalid Host %q", host)
	}
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = appendRequestURI(b, req.URL)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	if req.ContentLength > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		b = append(b, "\r\nContent-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
	}
	b = append(b, "\r\n"...)
	for k, vs := range req.Header {
		if requestHeadExcluded[k] {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("invalid header field name %q", k)
		}
		for _, v := range vs {
			v = headerValue(v)
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("invalid header field value for %q", k)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return append(b, "\r\n"...), nil
}

// appendRequestURI appends u.RequestURI() to b without building it as a string first,
// for the common URL of a path and a query.
func appendRequestURI(b []byte, u *url.URL) []byte {
	if u.Opaque != "" {
		return append(b, u.RequestURI()...)
	}
	if path := u.EscapedPath(); path != "" {
		b = append(b, path...)
	} else {
		b = append(b, '/')
	}
	if u.ForceQuery || u.RawQuery != "" {
		b = append(b, '?')
		b = append(b, u.RawQuery...)
	}
	return b
}

// headerValue is v with line breaks turned to spaces and surrounding white space
// trimmed, as http.Header.Write sends it.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	return strings.Trim(v, " \t")
}

// upstreamBody is the body of an answer on an upstreamConn. Read and Close are called
// by one goroutine.
type upstreamBody struct {
	body io.ReadCloser
	pc   *upstreamConn // nil once closed
	// stop ends the context's hold on the connection; false when it already ended.
	stop     func() bool
	reusable bool
	eof      bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.pc == nil {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// watchIdle cuts the answer off unless more of it, or its end, arrives within d; each
// call restarts the wait.
func (b *upstreamBody) watchIdle(d time.Duration) {
	if b.pc != nil {
		b.pc.arm(d)
	}
}

// Close returns the connection to the idle set when the body was read to its end and
// the connection can carry another round trip, and closes it otherwise.
func (b *upstreamBody) Close() error {
	pc := b.pc
	if pc == nil {
		return nil
	}
	b.pc = nil
	fired := pc.disarm()
	if b.stop() && !fired && b.eof && b.reusable {
		pc.client.put(pc)
		return nil
	}
	pc.close()
	return nil
}
