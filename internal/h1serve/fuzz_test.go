package h1serve

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzAnswersAnyBytes sends arbitrary bytes on a connection and checks that the server
// answers with well-formed responses only, one per request it served, never panics, and
// ends the connection when the client has.
func FuzzAnswersAnyBytes(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nhi",
		"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /\r\n\r\n",
		preface,
	} {
		f.Add([]byte(seed))
	}
	var logged lastLine
	var served atomic.Int64 // requests the handler saw, for the input being fuzzed
	s := &Server{
		ErrorLog:          log.New(&logged, "", 0),
		ReadHeaderTimeout: 2 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			n, err := io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Length", "0") // every response parses alike, HEAD or not
			w.Header().Set("X-Read", r.Method+" "+r.URL.Path)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.Header().Set("X-Body-Bytes", string(rune('0'+n%10)))
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	serving := make(chan error, 1)
	go func() { serving <- s.Serve(ln) }()
	f.Cleanup(func() {
		_ = s.Close()
		<-serving
	})

	f.Fuzz(func(t *testing.T, input []byte) {
		served.Store(0)
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			_, _ = nc.Write(input)
			_ = nc.(*net.TCPConn).CloseWrite()
		}()
		out, err := io.ReadAll(nc)
		if err != nil && !isReset(err) {
			t.Fatalf("the server did not end the connection: %v", err)
		}
		whole := err == nil // a reset may have lost answers the server sent
		answered := 0       // responses from the handler
		br := bufio.NewReader(bytes.NewReader(out))
		for {
			if _, err := br.Peek(1); errors.Is(err, io.EOF) {
				break
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("malformed response to %q: %v in %q", input, err, out)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil && !isReset(err) {
				t.Fatalf("malformed response body to %q: %v in %q", input, err, out)
			}
			if resp.Header.Get("X-Read") != "" {
				answered++
			}
		}
		if n := served.Load(); whole && int64(answered) != n {
			t.Fatalf("%d answers from the handler to %q, which served %d requests: %q", answered, input, n, out)
		}
		if msg := logged.String(); msg != "" {
			t.Fatalf("the server logged %q for %q", msg, input)
		}
	})
}
