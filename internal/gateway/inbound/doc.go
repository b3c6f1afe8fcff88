// Package inbound owns the client-facing side of the gateway's HTTP listeners: the
// limits every inbound connection and request is held to, the servers configured with
// them (NewServer over TLS, NewClearTextServer in clear text), and reading a request
// body within them (ReadBody).
//
// The limits bound what a client can make the gateway hold without doing any work:
// how long it may take to send headers and body, how large they may be, and how long
// an idle keep-alive connection is kept. A request body is read into memory that grows
// with the bytes actually received, never with the length the client declares, so
// connections that declare large bodies and then stall cost little.
//
// The package does not bound how long responses take: responses stream for as long as
// the upstream engine generates, so no write timeout is set. It does not route, proxy
// or write error responses; the gateway maps ReadBody's errors to statuses with
// StatusCode and writes them in its own format.
package inbound
