package h1serve

import (
	"context"
	"sync"
	"time"
)

// aLongTimeAgo is a read deadline that ends a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// watch notices a client leaving while its request is served, so that the request's
// context is cancelled: once the request has run for Server.WatchAfter with its body read
// to its end, a read on the connection waits for the client's next byte or its leaving.
// Requests that end sooner cost a reading of the clock, and no read.
//
// The timer, once set, is left to run, and set again only when it finds the request
// armed too recently or is armed after it ran: a connection serving request after
// request sets it about once per WatchAfter, not once per request. A timer set earlier
// than every other wakes the thread waiting for the network, so a reset per request cost
// a context switch per request.
//
// Synchronisation model: begin and stop are called by the connection's goroutine, arm by
// whoever reads the request's body; the timer's goroutine runs the read. mu guards the
// fields; a read in progress is ended by stop through a past read deadline, and done
// tells when it has.
type watch struct {
	c     *conn
	mu    sync.Mutex
	timer *time.Timer
	// pending is set while the timer is set; armed is when the request armed the watch.
	pending bool
	armed   time.Time
	// current is the response being served, from begin to stop; only it may arm.
	current *response
	cancel  context.CancelFunc // the armed request's
	// serving is set from arm to stop; reading while a read runs, until done closes.
	serving, reading, aborted bool
	done                      chan struct{}
}

// begin makes r the response whose request may arm the watch.
func (w *watch) begin(r *response) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.current = r
}

// arm starts the wait before the watch for r's request, unless the watch is armed or r
// is not the current response (a late read of a finished request's body).
func (w *watch) arm(r *response) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.serving || w.current != r {
		return
	}
	w.serving, w.cancel, w.armed = true, r.cancel, time.Now()
	if w.pending {
		return
	}
	w.pending = true
	if w.timer == nil {
		w.timer = time.AfterFunc(w.c.srv.watchAfter(), w.run)
		return
	}
	w.timer.Reset(w.c.srv.watchAfter())
}

// run, once the serving request has been armed for WatchAfter, reads the connection until
// the client sends a byte, which is kept for the next request, or leaves, which cancels
// the request; for a request armed more recently, it sets the timer for the rest.
func (w *watch) run() {
	w.mu.Lock()
	w.pending = false
	if !w.serving || w.reading {
		w.mu.Unlock()
		return
	}
	if wait := w.c.srv.watchAfter() - time.Since(w.armed); wait > 0 {
		w.pending = true
		w.timer.Reset(wait)
		w.mu.Unlock()
		return
	}
	w.reading, w.done = true, make(chan struct{})
	w.mu.Unlock()

	var b [1]byte
	n, err := w.c.nc.Read(b[:])

	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case n == 1:
		w.c.src.pending, w.c.src.hasPending = b[0], true
	case err != nil && !w.aborted:
		w.cancel()
	}
	w.reading = false
	close(w.done)
}

// stop ends the watch of the current request, waiting for a read in progress to end.
func (w *watch) stop() {
	w.mu.Lock()
	w.serving, w.current = false, nil
	done := w.done
	if !w.reading {
		done = nil
	}
	w.aborted = done != nil
	w.mu.Unlock()
	if done == nil {
		return
	}
	_ = w.c.nc.SetReadDeadline(aLongTimeAgo)
	<-done
	w.mu.Lock()
	w.aborted = false
	w.mu.Unlock()
}
