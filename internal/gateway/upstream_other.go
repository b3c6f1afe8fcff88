//go:build !unix

package gateway

import "net"

// connAlive reports whether an idle connection may carry a request; without a read
// that does not block, a connection the peer closed shows when it is written to.
func connAlive(net.Conn) bool { return true }
