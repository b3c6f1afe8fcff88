//go:build linux

package writewait

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dialPair returns both ends of a loopback TCP connection; the client end's send buffer
// is set to sndbuf bytes unless sndbuf is 0.
func dialPair(t *testing.T, sndbuf int) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{}
	if sndbuf > 0 {
		d.Control = func(_, _ string, raw syscall.RawConn) error {
			var err error
			if cerr := raw.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sndbuf)
			}); cerr != nil {
				return cerr
			}
			return err
		}
	}
	client, err = d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// TestWriteAndWaitReturnsOnceTheAnswerCanBeRead: the request arrives whole, the call
// returns only after the peer answered, and the read after it finds the answer.
func TestWriteAndWaitReturnsOnceTheAnswerCanBeRead(t *testing.T) {
	client, server := dialPair(t, 0)
	w := ForConn(client)
	if w == nil {
		t.Fatal("ForConn of a TCP connection is nil")
	}
	head, body := []byte("GET /metrics HTTP/1.1\r\n\r\n"), []byte("and a body")
	// The peer answers only once the call is seen waiting in the network poller, so a
	// call that returned without waiting for the answer is seen returned first.
	answer := make(chan struct{})
	received := make(chan []byte, 1)
	go func() {
		got := make([]byte, len(head)+len(body))
		_, err := io.ReadFull(server, got)
		received <- got
		<-answer
		if err == nil {
			_, _ = server.Write([]byte("answer"))
		}
	}()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := w.WriteAndWait(head, body)
		done <- result{n, err}
	}()
	if got := <-received; !bytes.Equal(got, append(head, body...)) {
		t.Fatalf("the peer received %q, want %q", got, append(head, body...))
	}
	for !waitingInPoller("writewait.(*Writer).WriteAndWait") {
		select {
		case r := <-done:
			t.Fatalf("WriteAndWait returned (%d, %v) before the peer answered", r.n, r.err)
		default:
			runtime.Gosched()
		}
	}
	close(answer)
	if r := <-done; r.n != len(head)+len(body) || r.err != nil {
		t.Fatalf("WriteAndWait = (%d, %v), want (%d, nil)", r.n, r.err, len(head)+len(body))
	}
	got := make([]byte, len("answer"))
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "answer" {
		t.Fatalf("read after the wait: %q, %v", got, err)
	}
	// The Writer serves the connection's next request as well.
	go func() {
		got := make([]byte, len(head))
		if _, err := io.ReadFull(server, got); err == nil {
			_, _ = server.Write([]byte("again"))
		}
	}()
	if n, err := w.WriteAndWait(head, nil); n != len(head) || err != nil {
		t.Fatalf("second WriteAndWait = (%d, %v), want (%d, nil)", n, err, len(head))
	}
	got = make([]byte, len("again"))
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "again" {
		t.Fatalf("read after the second wait: %q, %v", got, err)
	}
}

// TestWriteAndWaitLeavesADeadlineToTheRead: when no answer comes before the read
// deadline, the call reports the whole request written and the read after it the
// deadline.
func TestWriteAndWaitLeavesADeadlineToTheRead(t *testing.T) {
	client, _ := dialPair(t, 0)
	if err := client.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	head := []byte("GET / HTTP/1.1\r\n\r\n")
	if n, err := ForConn(client).WriteAndWait(head, nil); n != len(head) || err != nil {
		t.Fatalf("WriteAndWait = (%d, %v), want (%d, nil)", n, err, len(head))
	}
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the wait: %v, want the deadline", err)
	}
}

// TestWriteAndWaitReportsWhatTheSocketTookOfALargeRequest: a request larger than the
// send buffer is written in part, without waiting, and the caller's ordinary write of
// the rest completes it.
func TestWriteAndWaitReportsWhatTheSocketTookOfALargeRequest(t *testing.T) {
	client, server := dialPair(t, 4<<10)
	body := make([]byte, 4<<20)
	for i := range body {
		body[i] = byte(i*7 + i>>8)
	}
	head := []byte("POST / HTTP/1.1\r\n\r\n")
	received := make(chan []byte, 1)
	go func() {
		got, _ := io.ReadAll(io.LimitReader(server, int64(len(head)+len(body))))
		received <- got
	}()
	n, err := ForConn(client).WriteAndWait(head, body)
	if err != nil || n <= 0 || n >= len(head)+len(body) {
		t.Fatalf("WriteAndWait = (%d, %v), want part of the %d bytes", n, err, len(head)+len(body))
	}
	rest := append(head[min(n, len(head)):], body[max(n-len(head), 0):]...)
	if _, err := client.Write(rest); err != nil {
		t.Fatal(err)
	}
	if got := <-received; !bytes.Equal(got, append(head, body...)) {
		t.Fatalf("the peer received %d bytes that differ from the %d sent", len(got), len(head)+len(body))
	}
}

// TestNoWriterWithoutADescriptor: a connection without a file descriptor has no Writer,
// and a nil Writer writes nothing.
func TestNoWriterWithoutADescriptor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := ForConn(a)
	if w != nil {
		t.Fatalf("ForConn of a pipe = %v, want nil", w)
	}
	if n, err := w.WriteAndWait([]byte("x"), nil); n != 0 || err != nil {
		t.Fatalf("nil WriteAndWait = (%d, %v), want (0, nil)", n, err)
	}
}

// waitingInPoller reports whether a goroutine running fn waits in the network poller.
func waitingInPoller(fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
