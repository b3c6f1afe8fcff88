package writewait

import (
	"net"
	"syscall"
)

// ForConn returns the Writer of conn, or nil when conn has no file descriptor to write
// to (such as a TLS connection or an in-memory pipe) or it could not be had.
func ForConn(conn net.Conn) *Writer {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return New(raw)
}
