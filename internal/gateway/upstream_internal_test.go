package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newTestUpstreamClient returns an upstreamClient with the gateway's bounds.
func newTestUpstreamClient(t *testing.T, headerTimeout time.Duration) *upstreamClient {
	t.Helper()
	c := &upstreamClient{dialer: &net.Dialer{Timeout: time.Second}, headerTimeout: headerTimeout,
		idleTimeout: upstreamIdleConnTimeout, maxIdle: upstreamMaxIdleConns, maxIdlePerHost: upstreamMaxIdleConnsPerHost}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// countingServer serves h and counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// post returns a POST of body held in memory, as the gateway sends its own client.
func post(t *testing.T, ctx context.Context, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	setBody(req, []byte(body))
	req.Header.Set("X-Test", "a\r\nb")
	return req
}

func TestUpstreamClientReusesConnectionsReadToTheEnd(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Sum")
		_, _ = w.Write([]byte(r.Method + " " + r.Host + " " + r.Header.Get("X-Test") + " " + string(body)))
		w.Header().Set("X-Sum", "ok")
	})
	c := newTestUpstreamClient(t, time.Minute)
	large := strings.Repeat("x", 48<<10) // more than a TCP segment or a socket's first write
	// Every body goes with its head in one writev, whatever its size.
	for i, body := range []string{"small", large, "small", large + "y"} {
		resp, err := c.RoundTrip(post(t, context.Background(), srv.URL+"/p?q=1", body))
		if err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want := "POST " + strings.TrimPrefix(srv.URL, "http://") + " a  b " + body; err != nil || string(got) != want {
			t.Fatalf("round trip %d read %.40q, %v; want %.40q", i, got, err, want)
		}
		if resp.Trailer.Get("X-Sum") != "ok" {
			t.Errorf("round trip %d trailers %v, want X-Sum: ok", i, resp.Trailer)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 4 sequential round trips, want 1", n)
	}
}

// TestUpstreamClientRefusesRequestsItCannotWrite checks that a body not held in memory
// and a body of another length than declared are refused before anything is written, on
// the reused connection, which is not taken for stale: no request reaches the server and
// no other connection is dialled.
func TestUpstreamClientRefusesRequestsItCannotWrite(t *testing.T) {
	var served atomic.Int32
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	})
	c := newTestUpstreamClient(t, time.Minute)
	resp, err := c.RoundTrip(post(t, context.Background(), srv.URL, "b")) // leaves an idle connection
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()

	streamed, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("b"))
	if err != nil {
		t.Fatal(err)
	}
	short := post(t, context.Background(), srv.URL, "b")
	short.ContentLength = 2
	for _, tt := range []struct {
		name string
		req  *http.Request
		want string
	}{
		{"a streamed body", streamed, "only request bodies held in memory"},
		{"a body shorter than declared", short, "request body has 1 bytes, not the 2 declared"},
	} {
		_, err := c.RoundTrip(tt.req)
		if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, errStaleConn) {
			t.Errorf("%s: RoundTrip error = %v, want %q and not a stale connection", tt.name, err, tt.want)
		}
	}
	if n, d := served.Load(), conns.Load(); n != 1 || d != 1 {
		t.Errorf("the server answered %d requests on %d connections, want 1 on 1", n, d)
	}
}

// TestUpstreamClientWatchesIdleBodies cuts off a body that stalls under watchIdle, and
// keeps reusing a connection whose bodies arrived in time: the watch of one round trip
// must not cut off the next.
func TestUpstreamClientWatchesIdleBodies(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("first"))
		if r.URL.Query().Has("stall") {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	})
	c := newTestUpstreamClient(t, time.Minute)
	read := func(url string) (string, error) {
		resp, err := c.RoundTrip(post(t, context.Background(), url, "b"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		w, ok := resp.Body.(idleWatcher)
		if !ok {
			t.Fatalf("body %T cannot be watched", resp.Body)
		}
		w.watchIdle(200 * time.Millisecond) // ample for a loopback answer
		got, err := io.ReadAll(resp.Body)
		return string(got), err
	}
	for i := range 3 {
		time.Sleep(250 * time.Millisecond) // past the last watch's end
		if got, err := read(srv.URL); got != "first" || err != nil {
			t.Fatalf("round trip %d read %q, %v; want first", i, got, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 watched round trips, want 1", n)
	}
	got, err := read(srv.URL + "?stall")
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() || got != "first" {
		t.Errorf("stalled body read %q, %v; want first and a timeout", got, err)
	}
}

func TestUpstreamClientClosesConnectionsNotReadToTheEnd(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("y"), 64<<10))
	})
	c := newTestUpstreamClient(t, time.Minute)
	for range 2 {
		resp, err := c.RoundTrip(post(t, context.Background(), srv.URL, "b"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: a body left unread closes its connection", n)
	}
}

// TestUpstreamClientRedialsClosedIdleConnections serves one request per connection and
// closes it, without saying so in the answer: the next request must not fail, and the
// idle connection's probe, not a resend after a failed write, must make the client dial
// anew.
func TestUpstreamClientRedialsClosedIdleConnections(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		_ = conn.Close()
	})
	c := newTestUpstreamClient(t, time.Minute)
	addr := srv.Listener.Addr().String()
	const trips = 3
	for i := range trips {
		resp, err := c.RoundTrip(post(t, context.Background(), srv.URL, "b"))
		if err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if i == trips-1 {
			break
		}
		// Let the server's close arrive before the next round trip: a POST whose
		// connection is closed after it was written is not sent again (the engine may
		// have read it), so a close racing the next write is not this test's case.
		c.mu.Lock()
		closed := c.idle[addr][0]
		c.mu.Unlock()
		for deadline := time.Now().Add(5 * time.Second); closed.probe.alive(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round trip %d: the server's close did not reach the idle connection in 5 s", i)
			}
		}
		pc, err := c.conn(context.Background(), addr)
		if err != nil {
			t.Fatalf("round trip %d: %v", i+1, err)
		}
		if pc == closed || pc.reused {
			t.Fatalf("round trip %d: handed the idle connection the server closed; want a new one", i+1)
		}
		c.put(pc) // the next round trip reuses it
	}
}

func TestUpstreamClientRequestEnds(t *testing.T) {
	release := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)

	t.Run("when its context does", func(t *testing.T) {
		c := newTestUpstreamClient(t, time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		if _, err := c.RoundTrip(post(t, ctx, srv.URL, "b")); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	})
	t.Run("when the headers do not arrive in time", func(t *testing.T) {
		c := newTestUpstreamClient(t, 10*time.Millisecond)
		_, err := c.RoundTrip(post(t, context.Background(), srv.URL, "b"))
		var netErr net.Error
		if !errors.As(err, &netErr) || !netErr.Timeout() || isConnectError(err) {
			t.Errorf("error %v, want a timeout after connecting", err)
		}
	})
	t.Run("when it cannot connect", func(t *testing.T) {
		c := newTestUpstreamClient(t, time.Minute)
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		_ = ln.Close()
		if _, err := c.RoundTrip(post(t, context.Background(), "http://"+addr, "b")); !isConnectError(err) {
			t.Errorf("error %v, want a connection failure", err)
		}
	})
}

func TestUpstreamClientSweepsIdleConnections(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c := newTestUpstreamClient(t, time.Minute)
	resp, err := c.RoundTrip(post(t, context.Background(), srv.URL, "b"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	c.mu.Lock()
	if c.nidle != 1 {
		t.Fatalf("%d idle connections, want 1", c.nidle)
	}
	for _, list := range c.idle {
		list[0].idleSince = time.Now().Add(-c.idleTimeout)
	}
	c.mu.Unlock()
	c.sweep()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nidle != 0 || len(c.idle) != 0 {
		t.Errorf("%d idle connections in %d addresses after the sweep, want none", c.nidle, len(c.idle))
	}
}

func TestAppendRequestURIWritesRequestURI(t *testing.T) {
	targets := []string{
		"/v1/chat/completions", "/v1/models?limit=2&x=%20y", "/a%2Fb/c?", "/?", "/", "*",
		"/caf%C3%A9?q=1#frag", "/path;params?a=b", "//double/slash", "http://host:8/abs?q",
	}
	urls := []*url.URL{{Path: ""}, {Opaque: "//opaque/x", Scheme: "http", RawQuery: "q=1"}}
	for _, target := range targets {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("ParseRequestURI(%q): %v", target, err)
		}
		urls = append(urls, u)
	}
	for _, u := range urls {
		if got, want := string(appendRequestURI([]byte("GET "), u)), "GET "+u.RequestURI(); got != want {
			t.Errorf("appendRequestURI(%#v) = %q, want %q", u, got, want)
		}
	}
}

func TestUpstreamRequestReplaysItsBody(t *testing.T) {
	client, err := http.NewRequest(http.MethodPost, "http://gateway.example/v1/completions?x=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	client.RemoteAddr = "192.0.2.7:5000"
	client.Header.Set("X-Forwarded-For", "198.51.100.1")
	body := []byte(`{"model":"m","prompt":"hello"}`)
	out := upstreamRequest(context.Background(), client, "10.0.0.3", 8000, body, nil)
	if got, want := out.URL.String(), "http://10.0.0.3:8000/v1/completions?x=1"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	if got, want := out.Header.Get("X-Forwarded-For"), "198.51.100.1, 192.0.2.7"; got != want {
		t.Errorf("X-Forwarded-For = %q, want %q", got, want)
	}
	if out.Host != "gateway.example" || out.ContentLength != int64(len(body)) {
		t.Errorf("Host, ContentLength = %q, %d", out.Host, out.ContentLength)
	}
	for range 2 { // the body, then its replay
		got, err := io.ReadAll(out.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("body = %q, %v; want %q", got, err, body)
		}
		if out.Body, err = out.GetBody(); err != nil {
			t.Fatal(err)
		}
	}
	// The shared X-Forwarded-Proto value is copied, not written into, by a filter adding
	// a value.
	out.Header["X-Forwarded-Proto"] = append(out.Header["X-Forwarded-Proto"], "other")
	if again := upstreamRequest(context.Background(), client, "10.0.0.3", 8000, nil, nil); len(again.Header["X-Forwarded-Proto"]) != 1 {
		t.Errorf("X-Forwarded-Proto of the next request = %q", again.Header["X-Forwarded-Proto"])
	}
}
