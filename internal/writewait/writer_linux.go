//go:build linux

package writewait

import (
	"os"
	"syscall"
	"unsafe"
)

// Writer writes requests on one connection and waits for their answers. It is made
// once per connection, so that a request allocates nothing, and serves one request at
// a time.
type Writer struct {
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

// New returns the Writer of the connection whose descriptor is raw, or nil when raw
// is nil.
func New(raw syscall.RawConn) *Writer {
	if raw == nil {
		return nil
	}
	w := &Writer{raw: raw}
	w.step = w.writeOrWake
	return w
}

// WriteAndWait writes head and body in one writev and waits until the connection can
// be read, or its read deadline passes, or it is closed: the read that follows reports
// those. It returns how much it wrote: less than all when the socket's buffer took only
// part of the request, nothing from a nil Writer; the caller writes the rest the
// ordinary way. An error is the write's, or the connection's before anything was
// written. head must not be empty.
func (w *Writer) WriteAndWait(head, body []byte) (int, error) {
	if w == nil {
		return 0, nil
	}
	w.iov[0].Base = &head[0]
	w.iov[0].SetLen(len(head))
	w.niov, w.want, w.sent, w.err, w.waiting = 1, len(head)+len(body), 0, nil, false
	if len(body) > 0 {
		w.iov[1].Base = &body[0]
		w.iov[1].SetLen(len(body))
		w.niov = 2
	}
	err := w.raw.Read(w.step)
	w.iov = [2]syscall.Iovec{} // the buffers are the caller's
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
func (w *Writer) writeOrWake(fd uintptr) bool {
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
