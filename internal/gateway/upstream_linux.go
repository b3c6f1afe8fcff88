//go:build linux

package gateway

import (
	"os"
	"syscall"
	"unsafe"
)

// requestWriter writes a request on a connection and then waits, without reading,
// until the answer can be read. An ordinary write returns before the engine has
// answered, so the read after it finds nothing, costs a system call and only then
// waits; here the read that follows the wait finds the answer. It is made once per
// connection, so that a request allocates nothing.
//
// The write happens inside a raw read of the connection, after the read's readiness
// was reset, so that an answer arriving as soon as the request is out still wakes the
// wait.
type requestWriter struct {
	raw syscall.RawConn
	// The writev's buffers, count, and how much the request has and was written of.
	iov        [2]syscall.Iovec
	niov       int
	want, sent int
	err        error
	// waiting is set once the whole request is written and the wait has begun.
	waiting bool
	// step is the raw read's function, made once.
	step func(fd uintptr) bool
}

// newRequestWriter returns the writer of the connection whose descriptor is raw
// (rawConn), or nil when it has none to write to.
func newRequestWriter(raw syscall.RawConn) *requestWriter {
	if raw == nil {
		return nil
	}
	w := &requestWriter{raw: raw}
	w.step = w.writeOrWake
	return w
}

// writeAndWait writes head and body in one writev and waits until the connection can
// be read, or its deadline passes, or it is closed: the read that follows reports
// those. It returns how much it wrote, less than all when the socket's buffer took only
// part of the request, which the caller writes the ordinary way; an error is the
// write's.
func (w *requestWriter) writeAndWait(head, body []byte) (int, error) {
	w.iov[0].Base = &head[0]
	w.iov[0].SetLen(len(head))
	w.niov, w.want, w.sent, w.err, w.waiting = 1, len(head)+len(body), 0, nil, false
	if len(body) > 0 {
		w.iov[1].Base = &body[0]
		w.iov[1].SetLen(len(body))
		w.niov = 2
	}
	err := w.raw.Read(w.step)
	w.iov = [2]syscall.Iovec{} // the buffers are the connection's and the exchange's
	switch {
	case w.err != nil:
		return w.sent, w.err
	case err != nil && !w.waiting: // the read could not start: nothing was written
		return 0, err
	}
	return w.sent, nil
}

// writeOrWake is the raw read's step: first the writev, which asks to wait for the
// answer when it wrote the whole request; then, woken by the answer, nothing.
func (w *requestWriter) writeOrWake(fd uintptr) bool {
	if w.waiting {
		return true
	}
	for {
		n, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.niov))
		switch errno {
		case 0:
			w.sent = int(n)
			w.waiting = w.sent == w.want
			return !w.waiting
		case syscall.EINTR:
			continue
		case syscall.EAGAIN: // the socket's buffer is full: the caller writes it all
			return true
		default:
			w.err = os.NewSyscallError("writev", errno)
			return true
		}
	}
}

// send writes head and body on the connection and waits for the answer, when the
// connection allows it (requestWriter), and writes them the ordinary way otherwise.
func (pc *upstreamConn) send(head, body []byte) error {
	sent := 0
	if pc.writer != nil {
		var err error
		if sent, err = pc.writer.writeAndWait(head, body); err != nil {
			return err
		}
	}
	return pc.writeFrom(head, body, sent)
}
