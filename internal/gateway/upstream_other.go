//go:build !unix

package gateway

import "syscall"

// aliveProbe tells whether an idle connection may carry a request; without a read that
// does not block, a connection the peer closed shows when it is written to.
type aliveProbe struct{}

// newAliveProbe returns the probe of a connection.
func newAliveProbe(syscall.RawConn, error) *aliveProbe { return nil }

// alive reports whether the connection may carry a request: always.
func (*aliveProbe) alive() bool { return true }
