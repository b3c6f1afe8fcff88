package gateway

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// closedAfter is a request body of n bytes that fails any read after them, as the HTTP/1
// server's body does once the response headers are written.
type closedAfter struct {
	t *testing.T
	r io.Reader
}

func (c *closedAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n == 0 && err == io.EOF {
		c.t.Error("the client's body was read past its length")
		return 0, errors.New("http: invalid Read on closed Body")
	}
	return n, nil // never EOF by itself: only the length ends the body
}

// TestOnceBodyEndsAtItsLength checks that a plain request's body of known length ends
// with its last byte, without another read of the client's body, which the server may
// have closed by then; and that a body of unknown length reads to the client's EOF.
func TestOnceBodyEndsAtItsLength(t *testing.T) {
	const text = "0123456789"
	for _, bufSize := range []int{1, 3, 10, 64} {
		b := &onceBody{r: &closedAfter{t: t, r: strings.NewReader(text)}, left: int64(len(text))}
		got, err := io.ReadAll(&chunked{r: b, size: bufSize})
		if err != nil || string(got) != text || !b.started() {
			t.Errorf("reads of %d: %q, %v, started %t; want %q", bufSize, got, err, b.started(), text)
		}
	}
	b := &onceBody{r: strings.NewReader(text), left: -1}
	if got, err := io.ReadAll(b); err != nil || string(got) != text {
		t.Errorf("unknown length: %q, %v; want %q", got, err, text)
	}
	if b := (&onceBody{r: strings.NewReader(""), left: -1}); b.started() {
		t.Error("an unread body reports started")
	}
}

// chunked reads from r at most size bytes at a time.
type chunked struct {
	r    io.Reader
	size int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.size)]) }
