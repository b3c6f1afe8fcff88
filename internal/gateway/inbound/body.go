package inbound

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

var (
	// ErrBodyTooLarge reports a request body that declares or sends more than
	// Limits.MaxBodyBytes. The caller should answer 413 Content Too Large.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrBodyTimeout reports a request body that did not fully arrive within
	// Limits.BodyReadTimeout. The caller should answer 408 Request Timeout. net/http
	// cancels the request's context when the read times out, so a caller that skips
	// writing to clients whose context is done must check for this error first.
	ErrBodyTimeout = errors.New("request body read timed out")
)

// firstBufferBytes is the most ReadBody allocates before the first body byte arrives.
const firstBufferBytes = 512

// ReadBody reads r's whole body within l (after WithDefaults) and returns it; it returns
// nil for a request without a body. The body is read into buf (from its start, up to its
// capacity) when it fits, so that a caller may reuse buffers; buf may be nil.
//
// Beyond buf, memory grows with the bytes received, never ahead of them by more than a
// factor of two (or 512 bytes), whatever Content-Length the client declares. A body that
// declares more than MaxBodyBytes is rejected before any of it is read. The whole
// read MUST finish within BodyReadTimeout, enforced by a read deadline on the
// connection through w; after a successful read the deadline is cleared, so the
// response is not bounded by it. After an error the deadline stays, which also bounds
// whatever net/http reads of the rest of the body.
//
// Errors wrap ErrBodyTooLarge, ErrBodyTimeout, http.ErrNotSupported (w cannot set read
// deadlines: a server bug) or the read failure; StatusCode maps each to its status.
func ReadBody(w http.ResponseWriter, r *http.Request, l Limits, buf []byte) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	l = l.WithDefaults()
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(l.BodyReadTimeout)); err != nil {
		return nil, fmt.Errorf("set request body read deadline: %w", err)
	}
	if r.ContentLength > l.MaxBodyBytes {
		return nil, tooLarge(l.MaxBodyBytes)
	}
	body, err := readLimited(http.MaxBytesReader(w, r.Body, l.MaxBodyBytes), r.ContentLength, l.MaxBodyBytes, buf[:0])
	if err != nil {
		return nil, err
	}
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("clear request body read deadline: %w", err)
	}
	return body, nil
}

// readLimited reads body to its end, appending to buf. declared is the length the
// client declared (-1 if unknown) and limit the most body may yield before failing with
// *http.MaxBytesError; both only cap how far the buffer may grow.
func readLimited(body io.Reader, declared, limit int64, buf []byte) ([]byte, error) {
	// One byte beyond the most the body can yield lets the read that reports the end
	// (or the excess) land without another allocation.
	ceiling := limit + 1
	if declared >= 0 {
		ceiling = declared + 1
	}
	if cap(buf) == 0 {
		buf = make([]byte, 0, min(ceiling, firstBufferBytes))
	}
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), ceiling))
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, readError(err, limit)
		}
	}
}

// readError classifies a failed body read.
func readError(err error, limit int64) error {
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		return tooLarge(limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("read request body: %w: %w", ErrBodyTimeout, err)
	default:
		return fmt.Errorf("read request body: %w", err)
	}
}

// tooLarge is the error for a body beyond limit bytes.
func tooLarge(limit int64) error {
	return fmt.Errorf("read request body: %w: limit is %d bytes", ErrBodyTooLarge, limit)
}

// StatusCode returns the HTTP status a caller should answer for an error from ReadBody:
// 413 for ErrBodyTooLarge, 408 for ErrBodyTimeout, 500 for http.ErrNotSupported and
// 400 for any other read failure. It returns 200 for a nil error.
func StatusCode(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBodyTimeout):
		return http.StatusRequestTimeout
	case errors.Is(err, http.ErrNotSupported):
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}
