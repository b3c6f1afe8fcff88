//go:build !linux

package gateway

import "syscall"

// requestWriter would write a request and wait for its answer without a read; only
// Linux has one.
type requestWriter struct{}

// newRequestWriter returns nil: requests are written the ordinary way.
func newRequestWriter(syscall.RawConn) *requestWriter { return nil }

// send writes head and body on the connection.
func (pc *upstreamConn) send(head, body []byte) error { return pc.writeFrom(head, body, 0) }
