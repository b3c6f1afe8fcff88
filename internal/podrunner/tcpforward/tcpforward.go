// Package tcpforward publishes a TCP port on one address and relays every connection
// accepted there, byte for byte and in both directions, to a target address. It knows
// nothing of the protocols it carries (HTTP/1, h2c, TLS, WebSocket all pass unchanged)
// and owns only its listener, its connections and their goroutines.
package tcpforward

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the connection to the target of one accepted connection.
const dialTimeout = 5 * time.Second

// Forwarder relays the connections accepted on its address to its target until it is
// closed. Its methods are safe for concurrent use.
type Forwarder struct {
	ln     net.Listener
	target string
	ctx    context.Context // canceled by Close: ends dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every relay

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // open connections on both sides, closed by Close
}

// Listen listens on addr and relays each accepted connection to target. A connection
// to target that fails closes the accepted connection.
func Listen(addr, target string) (*Forwarder, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Forwarder{ln: ln, target: target, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr returns the address the forwarder listens on.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

// Close stops listening, closes every relayed connection and returns once all of the
// forwarder's goroutines have ended.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	err := f.ln.Close()
	f.cancel()
	for c := range conns {
		_ = c.Close()
	}
	f.wg.Wait()
	return err
}

// accept hands each accepted connection to a relay until the listener closes.
func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // such as running out of file descriptors: try again shortly
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !f.track(c) {
			return
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// track records c so that Close closes it, or closes it and reports false if the
// forwarder is closed already.
func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

// release closes c and forgets it.
func (f *Forwarder) release(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	_ = c.Close()
}

// relay connects client to the target and copies both ways until both directions
// have ended. The end of one direction is passed on as a half-close, so protocols that
// shut down one side first keep working.
func (f *Forwarder) relay(client net.Conn) {
	defer f.wg.Done()
	defer f.release(client)
	ctx, cancel := context.WithTimeout(f.ctx, dialTimeout)
	upstream, err := (&net.Dialer{}).DialContext(ctx, "tcp", f.target)
	cancel()
	if err != nil {
		return
	}
	if !f.track(upstream) {
		return
	}
	defer f.release(upstream)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(upstream, client)
	}()
	pipe(client, upstream)
	<-done
}

// pipe copies from src to dst until src ends, then half-closes dst. If the copy fails
// both connections are closed, which ends the other direction too.
func pipe(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		_ = src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = dst.Close()
}
