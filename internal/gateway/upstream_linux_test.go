package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestUpstreamClientFinishesRequestsTheSocketTookPartOf sends bodies far larger than a
// send buffer shrunk to its minimum, so that the writev before the wait for the answer
// takes only part of each request: the rest must follow, in order, and the answer still
// be read, on one reused connection.
func TestUpstreamClientFinishesRequestsTheSocketTookPartOf(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.New()
		_, _ = io.Copy(sum, r.Body)
		_, _ = io.WriteString(w, hex.EncodeToString(sum.Sum(nil)))
	})
	c := newTestUpstreamClient(t, time.Minute)
	c.dialer.Control = func(_, _ string, raw syscall.RawConn) error {
		var err error
		if cerr := raw.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<10)
		}); cerr != nil {
			return cerr
		}
		return err
	}
	for i, size := range []int{1 << 20, 100, 3<<20 + 7} {
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(j*7 + j>>8 + i) // no period a misplaced chunk would hide in
		}
		resp, err := c.RoundTrip(post(t, context.Background(), srv.URL, string(body)))
		if err != nil {
			t.Fatalf("round trip %d (%d bytes): %v", i, size, err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		want := sha256.Sum256(body)
		if err != nil || !bytes.Equal(got, []byte(hex.EncodeToString(want[:]))) {
			t.Fatalf("round trip %d (%d bytes): the server read a body of digest %s, %v; want %x", i, size, got, err, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 sequential round trips, want 1", n)
	}
}
