package h1serve

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero fields of Server.
const (
	// DefaultReadHeaderTimeout is the default Server.ReadHeaderTimeout.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout is the default Server.IdleTimeout.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes is the default Server.MaxHeaderBytes.
	DefaultMaxHeaderBytes = http.DefaultMaxHeaderBytes
)

// Server serves HTTP/1.1 (and HTTP/1.0) requests on the connections of its listeners
// with Handler, as http.Server does, with these differences:
//
//   - The request's context is cancelled when the client closes its connection only once
//     the request has lasted WatchAfter and its body has been read to its end, rather
//     than from the start; until then, a client that leaves is noticed when a write to
//     it fails.
//   - Responses carry no sniffed Content-Type: a handler that wants one sets it.
//   - A handler may read the request body after it began the response (as with
//     http.ResponseController.EnableFullDuplex).
//   - Closing a request body of known length does not end it: the handler may read on,
//     and the server reads what it leaves unread after it returns (within a bound), to
//     keep the connection.
//   - The http.Server in the request's context (http.ServerContextKey) is the one that
//     serves HTTP/2, nil without it.
//
// Its fields must not change once it serves.
type Server struct {
	// Handler serves every request.
	Handler http.Handler
	// ReadHeaderTimeout bounds the time from the first byte of a request until its head
	// has been read; the connection is closed without an answer beyond it. Default
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for a keep-alive connection's next request. Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers; up to 4 KiB more are admitted
	// as read-buffer slack, as net/http does, and a request beyond is answered 431.
	// Default DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// WatchAfter is how long a request runs before its connection is watched for the
	// client leaving. Default 50ms.
	WatchAfter time.Duration
	// HTTP2 serves the connections that open with HTTP/2's connection preface (h2c with
	// prior knowledge); it must allow unencrypted HTTP/2. Nil answers them 505.
	HTTP2 *http.Server
	// ErrorLog receives handler panics and failures to accept; nil logs with package log.
	ErrorLog *log.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	h2        *handoff // lazily, with the first HTTP/2 connection
	closing   atomic.Bool
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

// Serve accepts connections on ln and serves each on its own goroutine until ln fails or
// the server is shut down; it closes ln and returns ErrServerClosed after Shutdown or
// Close, else the accept error.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		_ = ln.Close()
		return ErrServerClosed
	}
	defer s.untrack(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		switch {
		case err != nil && s.closing.Load():
			return ErrServerClosed
		case errors.Is(err, net.ErrClosed):
			return err
		case err != nil: // such as too many open files: the listener recovers
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logf("h1serve: accept error: %v; retrying in %v", err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := s.newConn(nc)
		if c == nil {
			_ = nc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

// Shutdown stops accepting connections, closes the idle ones, and waits for the others
// to finish their request and close, or for ctx to end, whichever comes first; it then
// shuts down the HTTP/2 server. It returns ctx's error if connections were still busy.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.closeListeners()
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
	if h2 := s.handoff(false); h2 != nil {
		return h2.srv.Shutdown(ctx)
	}
	return nil
}

// Close closes the listeners and every connection at once, and the HTTP/2 server.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.closeListeners()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	if h2 := s.handoff(false); h2 != nil {
		return h2.srv.Close()
	}
	return nil
}

// track records ln, unless the server is closing.
func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	s.listeners[ln] = struct{}{}
	return true
}

// untrack closes ln and forgets it.
func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = ln.Close()
	delete(s.listeners, ln)
}

// closeListeners closes every listener, which ends their Serve.
func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		_ = ln.Close()
	}
}

// closeIdle closes the connections waiting for a request and reports whether none is
// left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.idle.Load() {
			_ = c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

// newConn registers a connection, or returns nil when the server is closing.
func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	return c
}

// forget removes a connection that closed or was hijacked or handed off.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// handoff returns the HTTP/2 hand-off, starting it when start is set and s.HTTP2 is not
// nil; it returns nil when there is none.
func (s *Server) handoff(start bool) *handoff {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h2 == nil && start && s.HTTP2 != nil && !s.closing.Load() {
		s.h2 = newHandoff(s.HTTP2)
	}
	return s.h2
}

// logf logs through ErrorLog.
func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// readHeaderTimeout, idleTimeout, headBudget and watchAfter are the limits with their
// defaults.
func (s *Server) readHeaderTimeout() time.Duration {
	return cmpOr(s.ReadHeaderTimeout, DefaultReadHeaderTimeout)
}

func (s *Server) idleTimeout() time.Duration { return cmpOr(s.IdleTimeout, DefaultIdleTimeout) }

func (s *Server) headBudget() int64 {
	return int64(cmpOr(s.MaxHeaderBytes, DefaultMaxHeaderBytes)) + 4096
}

func (s *Server) watchAfter() time.Duration { return cmpOr(s.WatchAfter, 50*time.Millisecond) }

// cmpOr returns v, or def when v is not positive.
func cmpOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
