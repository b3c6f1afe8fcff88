package inbound

import (
	"bufio"
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

// clientWait bounds how long a test client waits for the server, so a broken server
// fails a test instead of hanging it. Tests never assert how long anything took.
const clientWait = 10 * time.Second

// startServer serves h on 127.0.0.1 through NewServer(h, l) until the test ends.
func startServer(t *testing.T, l Limits, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config = NewServer(h, l)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// rawConn is a client connection to srv that writes bytes exactly as given.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// dial opens a raw connection to srv, closed when the test ends.
func dial(t *testing.T, srv *httptest.Server) *rawConn {
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
