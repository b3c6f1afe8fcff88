//go:build !linux

package writewait

import "syscall"

// Writer would write a request and wait for its answer without a read; only Linux has
// one.
type Writer struct{}

// New returns nil: requests are written the ordinary way.
func New(syscall.RawConn) *Writer { return nil }

// WriteAndWait writes nothing.
func (*Writer) WriteAndWait(head, body []byte) (int, error) { return 0, nil }
