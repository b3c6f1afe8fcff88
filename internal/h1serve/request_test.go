package h1serve

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/switchboard-llm/switchboard/internal/h1wire"
	"github.com/switchboard-llm/switchboard/internal/h1wire/h1wiretest"
)

// commonRequests are requests as clients of the gateway write them, followed by the
// start of the next one on the connection.
var commonRequests = []string{
	// Go's net/http client (the OpenAI Go SDK).
	"POST /v1/chat/completions HTTP/1.1\r\nHost: gw.example:8080\r\nUser-Agent: OpenAI/Go 1.12.0\r\nContent-Length: 17\r\n" +
		"Accept: application/json\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n{\"model\":\"llama\"}GET /",
	// curl, wrk, and python's httpx with lower-case names.
	"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
	"POST /v1/completions?x=1&y=%20 HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\n{}",
	// Repeated fields, blanks around values, a closing connection, no Host.
	"DELETE /a/b%2Fc HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a:  2 \t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\r\nX-Weird_Name-1: v\r\nCookie: a=b\r\n\r\n",
	// A body cut short, and a method of its own.
	"PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nshort",
	"PURGE /cache HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz",
}

// uncommonRequests are requests the fast path leaves to net/http, each for its own
// reason, among them every framing a request could be smuggled with.
var uncommonRequests = []string{
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +2\r\n\r\nok",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2 2\r\n\r\nok",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\nok",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\nok",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET http://a/b HTTP/1.1\r\nHost: c\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: h\r\n\r\n",
	"GET / HTTP/2.0\r\nHost: h\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
	"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
	"GET / HTTP/1.1\nHost: h\n\n",
	"GET / HTTP/1.1\r\nHost: h\n\r\n",
	"GET / HTTP/1.1\r\nX: a\r\n b\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nX : a\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nX: a\x01\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nTrailer: X\r\n\r\n",
	"G(T / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
	"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /\x7f HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h",
	"",
	"garbage\r\n\r\n",
}

func TestReadRequestTakesTheFastPathForCommonRequests(t *testing.T) {
	for _, raw := range commonRequests {
		head, ok := peekCommonHead(raw)
		if !ok {
			t.Fatalf("%q: the fast path does not take it", head)
		}
		assertSameRequestAsNetHTTP(t, []byte(raw))
	}
}

func TestReadRequestLeavesUncommonRequestsToNetHTTP(t *testing.T) {
	for _, raw := range uncommonRequests {
		if head, ok := peekCommonHead(raw); ok {
			t.Errorf("%q: the fast path takes it", head)
		}
		assertSameRequestAsNetHTTP(t, []byte(raw))
	}
}

// TestReadRequestWaitsForTheHead checks heads that arrive a byte at a time, and heads
// larger than the buffer.
func TestReadRequestWaitsForTheHead(t *testing.T) {
	for _, raw := range append(commonRequests, uncommonRequests...) {
		assertSameRequestAsNetHTTP(t, []byte(raw), iotest.OneByteReader)
	}
	big := "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\n\r\n"
	assertSameRequestAsNetHTTP(t, []byte(big))
}

func FuzzReadRequest(f *testing.F) {
	for _, raw := range append(commonRequests, uncommonRequests...) {
		f.Add([]byte(raw), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, oneByte bool) {
		if oneByte {
			assertSameRequestAsNetHTTP(t, raw, iotest.OneByteReader)
		} else {
			assertSameRequestAsNetHTTP(t, raw)
		}
	})
}

// peekCommonHead returns the head of raw and whether the fast path takes it.
func peekCommonHead(raw string) (string, bool) {
	head, ok := h1wire.PeekHead(bufio.NewReader(strings.NewReader(raw)))
	if !ok {
		return raw, false
	}
	_, ok = parseCommonHead(head)
	return string(head), ok
}

// assertSameRequestAsNetHTTP reads raw with readCommonRequest, and with http.ReadRequest
// where it declines, and with http.ReadRequest alone, each through wrap (if any) and a
// 4 KiB buffer, and compares the requests, their bodies and what is left after them.
func assertSameRequestAsNetHTTP(t *testing.T, raw []byte, wrap ...func(io.Reader) io.Reader) {
	t.Helper()
	gotBR, wantBR := h1wiretest.Reader(raw, bufferSize, wrap...), h1wiretest.Reader(raw, bufferSize, wrap...)
	got, common := readCommonRequest(gotBR)
	var gotErr error
	if !common {
		if gotBR.Buffered() > len(raw) || !bytes.HasPrefix(raw, peekAll(gotBR)) {
			t.Fatalf("%q: the fast path declined after consuming some of it", raw)
		}
		got, gotErr = http.ReadRequest(gotBR)
	}
	want, wantErr := http.ReadRequest(wantBR)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, net/http's %v", raw, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	type fields struct {
		Method, Proto, Host, RequestURI string
		URL                             any
		ProtoMajor, ProtoMinor          int
		Header, Trailer                 http.Header
		ContentLength                   int64
		TransferEncoding                []string
		Close, NoBody                   bool
	}
	of := func(r *http.Request) fields {
		return fields{r.Method, r.Proto, r.Host, r.RequestURI, *r.URL, r.ProtoMajor, r.ProtoMinor, r.Header,
			r.Trailer, r.ContentLength, r.TransferEncoding, r.Close, r.Body == http.NoBody}
	}
	if g, w := of(got), of(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%q:\n got %+v\nwant %+v", raw, g, w)
	}
	h1wiretest.AssertSameBodies(t, raw, got.Body, want.Body, gotBR, wantBR)
}

// peekAll returns what br holds, without consuming it.
func peekAll(br *bufio.Reader) []byte {
	buf, _ := br.Peek(br.Buffered())
	return buf
}
