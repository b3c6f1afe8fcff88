package h1serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// serve starts s on a loopback port and returns its address and listener; the server is
// closed when the test ends.
func serve(t *testing.T, s *Server) (string, *countingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	if s.ErrorLog == nil {
		s.ErrorLog = log.New(io.Discard, "", 0)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(cl) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), cl
}

// rawClient is a client connection that writes requests as text and reads responses.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawClient) send(text string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, text); err != nil {
		c.t.Fatalf("write request: %v", err)
	}
}

// response reads one response to a request of method, with its whole body.
func (c *rawClient) response(method string) (*http.Response, string) {
	c.t.Helper()
	resp, body, err := c.responseOrError(method)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return resp, body
}

// responseOrError reads one response to a request of method and as much of its body as
// arrives, with the error that ended the body early.
func (c *rawClient) responseOrError(method string) (*http.Response, string, error) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("read response head: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// answersOnOneConnection reads, for each of want in turn, a 200 answer to a request of
// method whose body is that want, and checks that ln accepted no other connection than
// the client's.
func (c *rawClient) answersOnOneConnection(ln *countingListener, method string, want ...string) {
	c.t.Helper()
	for _, w := range want {
		if resp, body := c.response(method); resp.StatusCode != 200 || body != w {
			c.t.Fatalf("status %d, body %q; want 200, %q", resp.StatusCode, body, w)
		}
	}
	if n := ln.accepted.Load(); n != 1 {
		c.t.Errorf("%d connections, want 1", n)
	}
}

// closed reports whether the server closes the connection within 5s (the next read
// ends); open, whether it is still open after 100ms.
func (c *rawClient) closed() bool { return c.endsWithin(5 * time.Second) }
func (c *rawClient) open() bool   { return !c.endsWithin(100 * time.Millisecond) }

func (c *rawClient) endsWithin(d time.Duration) bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

func TestServesKeepAliveRequestsOnOneConnection(t *testing.T) {
	addr, ln := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		w.Header().Set("X-Method", r.Method)
		fmt.Fprintf(w, "%s %s %s", r.Host, r.URL.Path, b)
	})})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 20 {
		body := strings.Repeat("x", i*300)
		resp, err := client.Post(fmt.Sprintf("http://%s/p%d", addr, i), "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("%s /p%d %s", addr, i, body); string(got) != want || resp.Header.Get("X-Method") != "POST" {
			t.Fatalf("request %d: %q (X-Method %q), want %q", i, got, resp.Header.Get("X-Method"), want)
		}
		// A body that fits the held buffer is framed by its length, a longer one chunked.
		if chunked := len(resp.TransferEncoding) > 0; chunked != (len(got) > heldBodyBytes) {
			t.Errorf("request %d: %d bytes with Transfer-Encoding %v, Content-Length %d", i, len(got), resp.TransferEncoding, resp.ContentLength)
		}
	}
	if n := ln.accepted.Load(); n != 1 {
		t.Errorf("%d connections accepted, want 1", n)
	}
}

func TestFramesResponses(t *testing.T) {
	tests := []struct {
		name    string
		request string
		method  string
		handler http.HandlerFunc
		// want is the status, the framing fields and body the client reads.
		wantStatus        int
		wantLength        string
		wantChunked       bool
		wantBody          string
		wantTrailer       http.Header
		wantConnection    string // a field other than close, which net/http's client removes
		wantClosed        bool
		wantShort         bool // the body ends before its declared length, unannounced
		wantNoContentType bool
	}{
		{
			name:       "small body by length",
			handler:    func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") },
			wantStatus: 200, wantLength: "5", wantBody: "hello",
		},
		{
			name:       "empty body by length",
			handler:    func(w http.ResponseWriter, r *http.Request) {},
			wantStatus: 200, wantLength: "0",
		},
		{
			name: "flushed body chunked",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "a")
				w.(http.Flusher).Flush()
				io.WriteString(w, "b")
			},
			wantStatus: 200, wantChunked: true, wantBody: "ab",
		},
		{
			name: "declared length kept",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "3")
				w.(http.Flusher).Flush()
				io.WriteString(w, "abc")
			},
			wantStatus: 200, wantLength: "3", wantBody: "abc",
		},
		{
			name: "trailers",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "body")
				w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
			},
			wantStatus: 200, wantChunked: true, wantBody: "body", wantTrailer: http.Header{"Grpc-Status": {"0"}},
		},
		{
			name:    "head",
			request: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: http.MethodHead,
			handler:    func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "not sent") },
			wantStatus: 200, wantLength: "8",
		},
		{
			name: "no content",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusNoContent)
				if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
					t.Errorf("write to a 204: %v, want ErrBodyNotAllowed", err)
				}
			},
			wantStatus: 204,
		},
		{
			name: "not modified",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusNotModified)
			},
			wantStatus: 304, wantNoContentType: true,
		},
		{
			name: "short of the declared length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "10")
				io.WriteString(w, "abc")
			},
			wantStatus: 200, wantLength: "10", wantBody: "abc", wantShort: true, wantClosed: true,
		},
		{
			name:       "client asks to close",
			request:    "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
			handler:    func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "bye") },
			wantStatus: 200, wantLength: "3", wantBody: "bye", wantClosed: true,
		},
		{
			name:       "HTTP/1.0 keep-alive",
			request:    "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			handler:    func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ten") },
			wantStatus: 200, wantLength: "3", wantBody: "ten", wantConnection: "keep-alive",
		},
		{
			name:    "HTTP/1.0 body until close",
			request: "GET / HTTP/1.0\r\n\r\n",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "old")
				w.(http.Flusher).Flush()
			},
			wantStatus: 200, wantBody: "old", wantClosed: true,
		},
		{
			name: "header values cannot split the response",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Evil", "a\r\nSet-Cookie: b")
				w.Header()["Bad Name"] = []string{"c"}
			},
			wantStatus: 200, wantLength: "0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := serve(t, &Server{Handler: tt.handler})
			c := dial(t, addr)
			request, method := tt.request, tt.method
			if request == "" {
				request, method = "GET / HTTP/1.1\r\nHost: h\r\n\r\n", http.MethodGet
			}
			c.send(request)
			resp, body, err := c.responseOrError(method)
			if short := errors.Is(err, io.ErrUnexpectedEOF); short != tt.wantShort || (err != nil && !short) {
				t.Errorf("body read: %v, want a short body %v", err, tt.wantShort)
			}
			if resp.Close != (tt.wantClosed && !tt.wantShort) {
				t.Errorf("response says close %v, want %v", resp.Close, tt.wantClosed)
			}
			if resp.StatusCode != tt.wantStatus || body != tt.wantBody {
				t.Errorf("status %d, body %q; want %d, %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if got := resp.Header.Get("Content-Length"); got != tt.wantLength {
				t.Errorf("Content-Length %q, want %q", got, tt.wantLength)
			}
			if chunked := len(resp.TransferEncoding) > 0; chunked != tt.wantChunked {
				t.Errorf("Transfer-Encoding %v, want chunked %v", resp.TransferEncoding, tt.wantChunked)
			}
			if tt.wantTrailer != nil && resp.Trailer.Get("Grpc-Status") != tt.wantTrailer.Get("Grpc-Status") {
				t.Errorf("trailer %v, want %v", resp.Trailer, tt.wantTrailer)
			}
			if got := resp.Header.Get("Connection"); got != tt.wantConnection {
				t.Errorf("Connection %q, want %q", got, tt.wantConnection)
			}
			if tt.wantNoContentType && resp.Header.Get("Content-Type") != "" {
				t.Errorf("Content-Type %q on a 304", resp.Header.Get("Content-Type"))
			}
			if resp.Header.Get("Date") == "" {
				t.Error("no Date field")
			}
			if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Bad Name") != "" {
				t.Errorf("header %v holds fields the handler did not set validly", resp.Header)
			}
			if tt.wantClosed && !c.closed() {
				t.Error("connection left open")
			}
			if !tt.wantClosed && !c.open() {
				t.Error("connection closed")
			}
		})
	}
}

func TestRefusesRequestsItCannotRead(t *testing.T) {
	tests := []struct {
		name, request string
		wantStatus    int
	}{
		{"malformed request line", "GET/ HTTP/1.1\r\nHost: h\r\n\r\n", http.StatusBadRequest},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", http.StatusBadRequest},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", http.StatusBadRequest},
		{"malformed field", "GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n", http.StatusBadRequest},
		{"HTTP/2 request line", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", http.StatusHTTPVersionNotSupported},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusNotImplemented},
		{"head too large", "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 8<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"unknown expectation", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nExpect: later\r\n\r\nx", http.StatusExpectationFailed},
		{"HTTP/2 preface without HTTP/2", preface, http.StatusHTTPVersionNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var served atomic.Int64
			addr, _ := serve(t, &Server{MaxHeaderBytes: 1 << 10, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })})
			c := dial(t, addr)
			c.send(tt.request)
			resp, body := c.response(http.MethodGet)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d (%q), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if !c.closed() {
				t.Error("connection left open")
			}
			if n := served.Load(); n != 0 {
				t.Errorf("handler ran %d times", n)
			}
		})
	}
}

func TestSendsContinueWhenTheBodyIsRead(t *testing.T) {
	addr, _ := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ignore" {
			io.WriteString(w, "no thanks")
			return
		}
		if got := r.Header.Get("Expect"); got != "" {
			t.Errorf("the handler sees Expect: %q", got)
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})})

	c := dial(t, addr)
	c.send("POST /read HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q (%v), want a 100 Continue", line, err)
	}
	if blank, _ := c.br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("100 Continue followed by %q", blank)
	}
	c.send("body")
	if resp, body := c.response(http.MethodPost); resp.StatusCode != 200 || body != "body" {
		t.Errorf("status %d, body %q; want 200 echoing body", resp.StatusCode, body)
	}

	c = dial(t, addr)
	c.send("POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	if resp, body := c.response(http.MethodPost); resp.StatusCode != 200 || body != "no thanks" {
		t.Errorf("status %d, body %q; want 200 and the handler's answer without a 100", resp.StatusCode, body)
	}
	if !c.closed() {
		t.Error("a connection whose client still holds its body stays open")
	}
}

func TestReadsWhatTheHandlerLeftOfTheBody(t *testing.T) {
	addr, ln := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})})
	c := dial(t, addr)
	small := strings.Repeat("s", 1000)
	c.send("POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n" + small)
	c.send("POST /2 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" + small + "\r\n0\r\n\r\n")
	c.send("GET /3 HTTP/1.1\r\nHost: h\r\n\r\n")
	c.answersOnOneConnection(ln, http.MethodPost, "/1", "/2", "/3")

	// A body beyond what the server reads on the handler's behalf closes the connection.
	dial(t, addr).postTooLongToDrain()
}

// TestClosingABodyOfKnownLengthDoesNotEndIt checks the difference from net/http that
// Server lists: a handler reads on after closing the body, and what it leaves, the
// server reads to keep the connection.
func TestClosingABodyOfKnownLengthDoesNotEndIt(t *testing.T) {
	addr, ln := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		head := make([]byte, 2)
		_, err := io.ReadFull(r.Body, head)
		_ = r.Body.Close()
		if r.URL.Path == "/read-on" {
			rest, err2 := io.ReadAll(r.Body)
			head, err = append(head, rest...), errors.Join(err, err2)
		}
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
		_, _ = w.Write(head)
	})})
	c := dial(t, addr)
	c.send("POST /read-on HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nabcde")
	c.send("POST /leave HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nfghij")
	c.send("GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	c.answersOnOneConnection(ln, http.MethodPost, "abcde", "fg", "")
}

// postTooLongToDrain sends a body twice as long as the server reads on a handler's
// behalf, for a handler that answers 200 without reading it: the answer must say that
// the connection closes, and the server must close it.
func (c *rawClient) postTooLongToDrain() {
	c.t.Helper()
	c.send(fmt.Sprintf("POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", 2*maxDrainBytes))
	go io.Copy(c.nc, io.LimitReader(zeros{}, 2*maxDrainBytes))
	if resp, _ := c.response(http.MethodPost); resp.StatusCode != 200 || !resp.Close {
		c.t.Errorf("status %d, close %t; want 200 and close", resp.StatusCode, resp.Close)
	}
	if !c.closed() {
		c.t.Error("connection left open with most of a body unread")
	}
}

func TestAnswersAtOnceAfterAFailedBodyRead(t *testing.T) {
	// The server would wait up to a minute for the rest of the body; the client, 10 s.
	addr, _ := serve(t, &Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
		}
	})})
	c := dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\nonly part")
	if resp, _ := c.response(http.MethodPost); resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("status %d, close %t; want 408 and close", resp.StatusCode, resp.Close)
	}
}

func TestAnAnswerBeforeAnUnreadBodyReachesTheClient(t *testing.T) {
	addr, _ := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge) // without reading the body
	})})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), 4<<20)
	// The server closes the connection with most of the body unread, and says so in the
	// answer; closing at once would reset the connection while the client still writes,
	// and the client would lose the answer.
	for i := range 20 {
		resp, err := (&http.Client{Transport: tr}).Post("http://"+addr+"/", "text/plain", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v, want the 413", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Fatalf("request %d: status %d, close %t; want 413 and close", i, resp.StatusCode, resp.Close)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// cancellation is closed when a request's context ends, for the tests of the watch.
type cancellation chan struct{}

// await waits up to 10 s for r's context to end, and closes c if it does.
func (c cancellation) await(r *http.Request) {
	select {
	case <-r.Context().Done():
		close(c)
	case <-time.After(10 * time.Second):
	}
}

// expect fails t unless c closes within 5 s.
func (c cancellation) expect(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s's context was not cancelled when its client left", what)
	}
}

func TestCancelsTheRequestWhenTheClientLeaves(t *testing.T) {
	cancelled := make(cancellation)
	addr, _ := serve(t, &Server{WatchAfter: 5 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		cancelled.await(r)
	})})
	c := dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
	time.Sleep(20 * time.Millisecond) // past WatchAfter
	_ = c.nc.Close()
	cancelled.expect(t, "the request")
}

// TestWatchesARequestArmedWhileTheTimerRuns arms the watch for a slow request while the
// timer a quick request before it set is still running: when it runs, the timer is set
// again for the rest of the slow request's wait, and the client leaving is noticed then.
// WatchAfter is long beside the 20 ms between the requests, so that the slow request is
// armed before the quick request's timer runs even on a loaded machine.
func TestWatchesARequestArmedWhileTheTimerRuns(t *testing.T) {
	cancelled := make(cancellation)
	addr, _ := serve(t, &Server{WatchAfter: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/quick" {
			cancelled.await(r)
		}
	})})
	c := dial(t, addr)
	c.send("GET /quick HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _ := c.response(http.MethodGet); resp.StatusCode != 200 {
		t.Fatalf("quick request: status %d", resp.StatusCode)
	}
	time.Sleep(20 * time.Millisecond) // the quick request's timer is still set
	c.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(400 * time.Millisecond) // past the slow request's WatchAfter
	_ = c.nc.Close()
	cancelled.expect(t, "the slow request")
}

func TestKeepsTheNextRequestTheWatchRead(t *testing.T) {
	addr, ln := serve(t, &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(50 * time.Millisecond) // the watch runs, and reads the next request's first byte
		}
		if err := r.Context().Err(); err != nil {
			t.Errorf("%s: context ended: %v", r.URL.Path, err)
		}
		io.WriteString(w, r.Method+" "+r.URL.Path)
	})})
	c := dial(t, addr)
	c.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(20 * time.Millisecond) // the watch reads on an empty connection
	c.send("GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	c.answersOnOneConnection(ln, http.MethodGet, "GET /slow", "GET /next")
}

func TestALateReadOfAFinishedBodyLeavesTheConnectionAlone(t *testing.T) {
	goLate, lateRead := make(chan struct{}), make(chan struct{})
	var lateErr error
	addr, _ := serve(t, &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			go func() { // reads on, during the next request, after the server drained the body
				<-goLate
				_, lateErr = io.ReadAll(r.Body)
				close(lateRead)
			}()
			io.WriteString(w, r.Method+" "+r.URL.Path)
			return
		}
		close(goLate)
		<-lateRead
		// A watch armed by the late read would now be reading the connection, and take
		// the first byte of this body from the handler.
		time.Sleep(20 * time.Millisecond)
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	})})
	c := dial(t, addr)
	c.send("POST /first HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc")
	if _, body := c.response(http.MethodPost); body != "POST /first" {
		t.Fatalf("body %q, want POST /first", body)
	}
	c.send("POST /second HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n")
	time.Sleep(60 * time.Millisecond)
	c.send("xyz")
	if _, body := c.response(http.MethodPost); body != "POST /second xyz" {
		t.Errorf("body %q, want POST /second xyz", body)
	}
	if !errors.Is(lateErr, http.ErrBodyReadAfterClose) {
		t.Errorf("a read after the handler returned: %v, want %v", lateErr, http.ErrBodyReadAfterClose)
	}
}

// TestALateReadOfAnUnreadBodyFails reads a body the handler left unread once the server
// has answered and is ending the connection: the read takes nothing from the connection,
// which is the server's.
func TestALateReadOfAnUnreadBodyFails(t *testing.T) {
	bodies := make(chan io.Reader, 1)
	addr, _ := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bodies <- r.Body
	})})
	dial(t, addr).postTooLongToDrain()
	if n, err := (<-bodies).Read(make([]byte, 10)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("a read after the connection closed: %d bytes, %v; want %v", n, err, http.ErrBodyReadAfterClose)
	}
}

func TestTheServerFramesTheBody(t *testing.T) {
	addr, _ := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "2")
		w.(http.Flusher).Flush()
		io.WriteString(w, "framed")
	})})
	c := dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	var head strings.Builder
	for !strings.HasSuffix(head.String(), "\r\n\r\n") {
		line, err := c.br.ReadString('\n')
		if err != nil {
			t.Fatalf("read head: %v after %q", err, head.String())
		}
		head.WriteString(line)
	}
	if h := head.String(); !strings.Contains(h, "Transfer-Encoding: chunked\r\n") || strings.Contains(h, "Content-Length") {
		t.Errorf("head %q, want chunked framing alone", h)
	}
}

func TestReadsTheBodyAfterTheResponseBegan(t *testing.T) {
	addr, _ := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "got: ")
		w.(http.Flusher).Flush()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read the body after flushing: %v", err)
		}
		w.Write(b)
	})})
	c := dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("got: "))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "got: " {
		t.Fatalf("first part %q (%v), want got: before the body is sent", first, err)
	}
	c.send("body")
	if rest, _ := io.ReadAll(resp.Body); string(rest) != "body" {
		t.Errorf("after the body: %q, want body", rest)
	}
}

func TestHijack(t *testing.T) {
	addr, _ := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer nc.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		line, _ := rw.ReadString('\n')
		rw.WriteString("echo " + line)
		rw.Flush()
	})})
	c := dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nhello\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("response %v, %v; want 101", resp, err)
	}
	if line, _ := c.br.ReadString('\n'); line != "echo hello\n" {
		t.Errorf("after the switch: %q, want the bytes sent with the request echoed", line)
	}
}

func TestHandsHTTP2ToItsServer(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Proto, r.URL.Path)
	})
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	addr, _ := serve(t, &Server{Handler: h, HTTP2: &http.Server{Handler: h, Protocols: &protocols}})
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()
	for _, path := range []string{"/a", "/b"} {
		resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "HTTP/2.0 " + path; string(body) != want {
			t.Errorf("body %q, want %q", body, want)
		}
	}
	// HTTP/1.1 on the same port is still served here.
	resp, err := http.Get("http://" + addr + "/c")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if string(body) != "HTTP/1.1 /c" {
		t.Errorf("body %q, want HTTP/1.1 /c", body)
	}
}

func TestRecoversFromHandlerPanics(t *testing.T) {
	var logged lastLine
	addr, _ := serve(t, &Server{
		ErrorLog: log.New(&logged, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic("boom")
			}
			io.WriteString(w, "fine")
		}),
	})
	c := dial(t, addr)
	c.send("GET /panic HTTP/1.1\r\nHost: h\r\n\r\n")
	if !c.closed() {
		t.Error("connection left open after the handler panicked")
	}
	c = dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response(http.MethodGet); resp.StatusCode != 200 || body != "fine" {
		t.Errorf("after a panic: status %d, body %q", resp.StatusCode, body)
	}
	if !strings.Contains(logged.String(), "boom") {
		t.Errorf("log %q does not name the panic", logged.String())
	}
}

// lastLine keeps the last line a logger wrote, for any number of goroutines.
type lastLine struct{ line atomic.Pointer[string] }

func (l *lastLine) Write(p []byte) (int, error) {
	s := string(p)
	l.line.Store(&s)
	return len(p), nil
}

func (l *lastLine) String() string {
	if s := l.line.Load(); s != nil {
		return *s
	}
	return ""
}

func TestShutdownWaitsForRequestsAndClosesIdleConnections(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, r.URL.Path)
	})}
	addr, _ := serve(t, s)
	idle := dial(t, addr)
	idle.send("GET /idle HTTP/1.1\r\nHost: h\r\n\r\n")
	idle.response(http.MethodGet)
	busy := dial(t, addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Error("idle connection left open by Shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	resp, body := busy.response(http.MethodGet)
	if body != "/slow" || !resp.Close {
		t.Errorf("in-flight request: body %q, close %v; want /slow, and the connection closing", body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("the listener still accepts after Shutdown")
	}
}

func TestShutdownClosesConnectionsThatSentNothing(t *testing.T) {
	s := &Server{ReadHeaderTimeout: time.Minute, Handler: http.NotFoundHandler()}
	addr, ln := serve(t, s)
	silent := dial(t, addr)
	waitFor(t, func() bool { return ln.accepted.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with a connection that never sent a request: %v, want it closed at once", err)
	}
	if !silent.closed() {
		t.Error("the silent connection is still open")
	}
}

// waitFor polls cond until it holds, for up to 5s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
