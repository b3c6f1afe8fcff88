package tcpforward

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstream listens on a free loopback port; serve handles each connection.
func upstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func forward(t *testing.T, target string) *Forwarder {
	t.Helper()
	f, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestRelaysBothWaysWithHalfClose(t *testing.T) {
	// The upstream reads the whole request, up to the client's half-close, then answers
	// with it reversed and closes.
	target := upstream(t, func(c net.Conn) {
		req, err := io.ReadAll(c)
		if err != nil {
			return
		}
		for i, j := 0, len(req)-1; i < j; i, j = i+1, j-1 {
			req[i], req[j] = req[j], req[i]
		}
		_, _ = c.Write(req)
	})
	f := forward(t, target)

	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	payload := bytes.Repeat([]byte("0123456789"), 100_000) // larger than socket buffers
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(payload) || got[0] != '9' || got[len(got)-1] != '0' {
		t.Errorf("got %d bytes starting %q, want the %d bytes reversed", len(got), got[:min(10, len(got))], len(payload))
	}
}

func TestCarriesHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello "+r.URL.Path)
	}))
	defer srv.Close()
	f := forward(t, srv.Listener.Addr().String())

	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for range 3 { // over one kept-alive connection
		resp, err := client.Get("http://" + f.Addr().String() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello /x" {
			t.Errorf("body = %q, want %q", body, "hello /x")
		}
	}
}

func TestUnreachableTargetClosesTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close() // nothing listens there any more
	f := forward(t, target)

	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("read %d bytes, want the connection closed", n)
	}
}

func TestCloseEndsOpenConnections(t *testing.T) {
	// The upstream never answers nor closes.
	target := upstream(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	f, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the relay connect

	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a connection open")
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the client's connection stayed open after Close")
	}
	if _, err := net.Dial("tcp", f.Addr().String()); err == nil {
		t.Error("the forwarder still accepts connections after Close")
	}
}

func TestListenFailsOnABusyAddress(t *testing.T) {
	f := forward(t, "127.0.0.1:1")
	if g, err := Listen(f.Addr().String(), "127.0.0.1:1"); err == nil {
		g.Close()
		t.Error("Listen on a busy address succeeded")
	}
}
