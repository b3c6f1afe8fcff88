package inbound

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clientWait bounds how long a test client waits for the server, so a broken server
// fails a test instead of hanging it. Tests never assert how long anything took.
const clientWait = 10 * time.Second

// testServer is a server under test on 127.0.0.1.
type testServer struct {
	URL      string
	Listener net.Listener
	client   *http.Client
	close    func()
}

// Client returns a client of the server, whose connections close with the server.
func (s *testServer) Client() *http.Client { return s.client }

// Close closes the server's connections and waits for its handlers to return.
func (s *testServer) Close() { s.close() }

// serverStarter serves h held to l until the test ends.
type serverStarter func(t *testing.T, l Limits, h http.Handler) *testServer

// eachServer runs test with each server a gateway listener may run: NewServer's
// (net/http, over TLS) and NewClearTextServer's (h1serve), both here in clear text.
func eachServer(t *testing.T, test func(t *testing.T, startServer serverStarter)) {
	t.Run("net/http", func(t *testing.T) {
		test(t, func(t *testing.T, l Limits, h http.Handler) *testServer {
			t.Helper()
			srv := httptest.NewUnstartedServer(h)
			srv.Config = NewServer(h, l)
			srv.Start()
			ts := &testServer{URL: srv.URL, Listener: srv.Listener, client: srv.Client(), close: srv.Close}
			t.Cleanup(ts.Close)
			return ts
		})
	})
	t.Run("h1serve", func(t *testing.T) {
		test(t, func(t *testing.T, l Limits, h http.Handler) *testServer {
			t.Helper()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := NewClearTextServer(h, l)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			tr := &http.Transport{}
			var once sync.Once
			ts := &testServer{URL: "http://" + ln.Addr().String(), Listener: ln, client: &http.Client{Transport: tr}, close: func() {
				once.Do(func() {
					tr.CloseIdleConnections()
					ctx, cancel := context.WithTimeout(context.Background(), clientWait)
					defer cancel()
					if err := srv.Shutdown(ctx); err != nil {
						t.Errorf("shutdown: %v", err)
						_ = srv.Close()
					}
					if err := <-served; !errors.Is(err, http.ErrServerClosed) {
						t.Errorf("serve: %v", err)
					}
				})
			}}
			t.Cleanup(ts.Close)
			return ts
		})
	})
}

// rawConn is a client connection to srv that writes bytes exactly as given.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// dial opens a raw connection to srv, closed when the test ends.
func dial(t *testing.T, srv *testServer) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(clientWait)); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// send writes s to the connection.
func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// response reads the next response from the connection.
func (c *rawConn) response(t *testing.T) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
