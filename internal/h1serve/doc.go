// Package h1serve serves HTTP/1.1 on clear-text listeners for an http.Handler, with less
// work per request than net/http's server: no goroutine and no read per request to watch
// for the client leaving, a response head and small body written in one system call,
// and the connection's buffers kept for its life. A request head as clients commonly
// send it (HTTP/1.1, a path, a Content-Length or no body) is parsed in place, in one
// string; any other is left to net/http (http.ReadRequest). Either way, what a handler
// sees is what net/http's server gives it, which a differential fuzz test holds; the
// differences are listed on Server.
//
// It owns connections from Accept to Close: their timeouts, keep-alive, response
// framing (Content-Length, chunked, trailers), Expect: 100-continue, Hijack and graceful
// shutdown. Connections that open with HTTP/2's preface (h2c with prior knowledge) are
// handed to a net/http server configured for it. TLS is not its job: listeners that
// terminate TLS keep net/http's server, which negotiates HTTP/2 by ALPN.
package h1serve
