package h1serve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkServe measures one keep-alive request and answer, a chat-sized POST and a
// small JSON answer, on one loopback connection, served by this package and by
// net/http's server with the same handler; client and server share the process, so the
// figures count both.
func BenchmarkServe(b *testing.B) {
	const body = `{"model":"llama-3-8b","messages":[{"role":"user","content":"hello there, how are you today?"}]}`
	request := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	answer := []byte(`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"fine"}}]}`)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	for _, srv := range []struct {
		name  string
		serve func(net.Listener) error
	}{
		{"h1serve", (&Server{Handler: handler}).Serve},
		{"net-http", (&http.Server{Handler: handler}).Serve},
	} {
		b.Run(srv.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close() // ends Serve; the client's close ends its connection
			go func() { _ = srv.serve(ln) }()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := io.WriteString(nc, request); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("answer %d: %v", resp.StatusCode, err)
				}
			}
		})
	}
}

// BenchmarkReadRequest measures reading a chat request's head, as the OpenAI Go SDK
// sends it, and setting up its body: by the fast path (readCommonRequest) and by
// http.ReadRequest, which the server used for every request before.
func BenchmarkReadRequest(b *testing.B) {
	raw := commonRequests[0]
	for _, read := range []struct {
		name string
		read func(*bufio.Reader) (*http.Request, error)
	}{
		{"common", func(br *bufio.Reader) (*http.Request, error) {
			if req, ok := readCommonRequest(br); ok {
				return req, nil
			}
			return nil, fmt.Errorf("the fast path declined %q", raw)
		}},
		{"net-http", http.ReadRequest},
	} {
		b.Run(read.name, func(b *testing.B) {
			src := strings.NewReader(raw)
			br := bufio.NewReaderSize(src, bufferSize)
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(raw)
				br.Reset(src)
				if _, err := read.read(br); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
