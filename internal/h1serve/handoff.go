package h1serve

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// preface is what an HTTP/2 client with prior knowledge sends first (RFC 9113 §3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// handoff passes connections that speak HTTP/2 to a net/http server, through a listener
// that yields them.
type handoff struct {
	srv   *http.Server
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// newHandoff starts srv on a listener of handed-off connections.
func newHandoff(srv *http.Server) *handoff {
	h := &handoff{srv: srv, conns: make(chan net.Conn), done: make(chan struct{})}
	go func() { _ = srv.Serve(h) }()
	return h
}

// pass hands nc, whose first bytes br has buffered, to the HTTP/2 server; it closes nc
// when the server no longer accepts.
func (h *handoff) pass(nc net.Conn, br *bufio.Reader) {
	select {
	case h.conns <- &bufferedConn{Conn: nc, br: br}:
	case <-h.done:
		_ = nc.Close()
	}
}

// Accept implements net.Listener.
func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr implements net.Listener.
func (h *handoff) Addr() net.Addr { return handoffAddr{} }

// handoffAddr is the address of the hand-off listener.
type handoffAddr struct{}

func (handoffAddr) Network() string { return "h1serve" }
func (handoffAddr) String() string  { return "h2c-handoff" }

// bufferedConn is a connection whose first bytes were read into br.
type bufferedConn struct {
	net.Conn
	br *bufio.Reader
}

// Read reads what br buffered, then the connection.
func (c *bufferedConn) Read(p []byte) (int, error) { return c.br.Read(p) }
