package inbound

import (
	"net/http"
	"time"

	"github.com/switchboard-llm/switchboard/internal/h1serve"
)

// Defaults for the zero fields of Limits.
const (
	// DefaultReadHeaderTimeout is the default Limits.ReadHeaderTimeout.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyReadTimeout is the default Limits.BodyReadTimeout.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultIdleTimeout is the default Limits.IdleTimeout.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultMaxHeaderBytes is the default Limits.MaxHeaderBytes.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxBodyBytes is the default Limits.MaxBodyBytes.
	DefaultMaxBodyBytes = 16 << 20
)

// Limits bound what one inbound client connection may cost the gateway. A zero or
// negative field takes its default (see WithDefaults).
type Limits struct {
	// ReadHeaderTimeout bounds the time from the start of a request (or from the end
	// of the previous one on a keep-alive connection) until its headers have been
	// read. A connection that exceeds it is closed without a response.
	// +optional; default DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds the time ReadBody may take to read a whole request body,
	// counted from when ReadBody starts. A body that has not fully arrived by then
	// MUST be rejected with ErrBodyTimeout. It does not bound the response.
	// +optional; default DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next request
	// before the server closes it.
	// +optional; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers. The servers admit up to 4 KiB
	// more as read-buffer slack; a request beyond that is answered 431 Request Header
	// Fields Too Large by the server itself, and the connection is closed.
	// +optional; default DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body read by ReadBody. A body that declares or
	// sends more MUST be rejected with ErrBodyTooLarge.
	// +optional; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// WithDefaults returns l with every zero or negative field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.BodyReadTimeout <= 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return l
}

// NewServer returns a server for h held to l's header and connection limits (after
// WithDefaults), for a listener that terminates TLS: it speaks HTTP/2 and HTTP/1.1 as
// ALPN negotiates. It sets no ReadTimeout or WriteTimeout: the body is bounded by
// ReadBody, and responses stream for as long as they need. h should read request
// bodies with ReadBody and the same l.
func NewServer(h http.Handler, l Limits) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	return newServer(h, l, &protocols)
}

// NewClearTextServer returns a server for h held to l as NewServer's is, for a listener
// in clear text: it speaks HTTP/1.1 with package h1serve, and HTTP/2 to clients that
// know the server does (h2c with prior knowledge; the deprecated h2c upgrade is not
// offered).
func NewClearTextServer(h http.Handler, l Limits) *h1serve.Server {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2 := newServer(h, l, &protocols)
	return &h1serve.Server{
		Handler:           h,
		ReadHeaderTimeout: h2.ReadHeaderTimeout,
		IdleTimeout:       h2.IdleTimeout,
		MaxHeaderBytes:    h2.MaxHeaderBytes,
		HTTP2:             h2,
	}
}

// newServer returns net/http's server for h, held to l, speaking protocols.
func newServer(h http.Handler, l Limits, protocols *http.Protocols) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		Protocols:         protocols,
	}
}
