// Package writewait writes a request on a connection and then waits, without reading,
// until the answer can be read.
//
// An ordinary write returns before the peer has answered, so the read after it finds
// nothing: it costs a system call, and only then does the goroutine wait for the
// answer. A Writer instead writes the request inside a raw read of the connection,
// after the read's readiness was reset, and lets that raw read wait: an answer that
// arrives as soon as the request is out still ends the wait, and the read that follows
// finds it. Only Linux has such a Writer; elsewhere, and for connections without a file
// descriptor (such as TLS connections), New returns nil, which writes nothing, and the
// caller writes the ordinary way.
package writewait
