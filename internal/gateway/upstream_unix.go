//go:build unix

package gateway

import "syscall"

// aliveProbe tells whether the peer of an idle connection has neither closed it nor
// sent anything, with one read that does not block. It is made once per connection, so
// that a probe allocates nothing.
type aliveProbe struct {
	raw syscall.RawConn // nil when the connection has no file descriptor to read
	// broken is set when the connection's descriptor could not be had: it is closed.
	broken bool
	read   func(fd uintptr) bool
	err    error
	buf    [1]byte
}

// newAliveProbe returns the probe of the connection whose descriptor rawConn returned as
// raw and err.
func newAliveProbe(raw syscall.RawConn, err error) *aliveProbe {
	p := &aliveProbe{raw: raw, broken: err != nil}
	p.read = func(fd uintptr) bool {
		_, p.err = syscall.Read(int(fd), p.buf[:])
		return true
	}
	return p
}

// alive reports whether the connection may carry a request.
func (p *aliveProbe) alive() bool {
	switch {
	case p.broken:
		return false
	case p.raw == nil:
		return true
	}
	if err := p.raw.Read(p.read); err != nil {
		return false
	}
	return p.err == syscall.EAGAIN
}
