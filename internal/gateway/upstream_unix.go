//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// connAlive reports whether the peer of an idle connection has neither closed it nor
// sent anything, with one read that does not block.
func connAlive(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var probe [1]byte
	var readErr error
	if err := raw.Read(func(fd uintptr) bool {
		_, readErr = syscall.Read(int(fd), probe[:])
		return true
	}); err != nil {
		return false
	}
	return readErr == syscall.EAGAIN
}
