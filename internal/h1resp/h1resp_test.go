package h1resp

import (
	"bufio"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/switchboard-llm/switchboard/internal/h1wire"
	"github.com/switchboard-llm/switchboard/internal/h1wire/h1wiretest"
)

// answers are responses as engines and backends write them, followed by the start of
// the next one on the connection.
var answers = []string{
	// net/http (engine-sim), a JSON answer.
	"HTTP/1.1 200 OK\r\nContent-Length: 27\r\nContent-Type: application/json\r\nDate: Sat, 05 Dec 2026 01:00:00 GMT\r\n\r\n{\"object\":\"chat.completion\"}HTTP/1.1",
	// uvicorn (vLLM): lower-case names.
	"HTTP/1.1 200 OK\r\ndate: Sat, 05 Dec 2026 01:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 5\r\ncontent-type: application/json\r\n\r\nhello",
	// An error, a closing connection, repeated fields and blanks around values.
	"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nX-A: 1\r\nx-a:  2 \t\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 404 \r\nContent-Length: 3\r\nConnection: Keep-Alive\r\n\r\nabcdef",
	"HTTP/1.1 200\r\nContent-Length: 2\r\nX-Weird_Name-1: v\r\n\r\nok",
	// A body cut short.
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	// Chunked: a stream of events, a trailer, chunks cut short or malformed.
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"f\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\nHTTP/1.1",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n2\r\nok\r\n0\r\nX-Status: 0\r\nx-more: y\r\n\r\nrest",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX: 1\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
}

// slowPaths are responses the fast path leaves to net/http, each for its own reason.
var slowPaths = []string{
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTrailer: X\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\n\r\nuntil the end",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok",
	"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX: a\x01\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nConnection: close, te\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2",
	"",
	"garbage\r\n\r\n",
}

func TestReadResponseTakesTheFastPathForCommonAnswers(t *testing.T) {
	for _, raw := range answers {
		head, ok := h1wire.PeekHead(bufio.NewReader(strings.NewReader(raw)))
		if !ok {
			t.Fatalf("h1wire.PeekHead(%q) found no head", raw)
		}
		if _, ok := parseHead(head, nil); !ok {
			t.Errorf("%q: parseHead left it to net/http", raw)
		}
		assertSameAsNetHTTP(t, []byte(raw), nil)
	}
}

func TestReadResponseLeavesOtherAnswersToNetHTTP(t *testing.T) {
	for _, raw := range slowPaths {
		if head, ok := h1wire.PeekHead(bufio.NewReader(strings.NewReader(raw))); ok {
			if _, ok := parseHead(head, nil); ok {
				t.Errorf("%q: parseHead took it", raw)
			}
		}
		assertSameAsNetHTTP(t, []byte(raw), nil)
	}
}

func TestReadResponseToHEADHasNoBody(t *testing.T) {
	req, err := http.NewRequest(http.MethodHead, "http://engine/", nil)
	if err != nil {
		t.Fatal(err)
	}
	assertSameAsNetHTTP(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nHTTP/1.1 200 OK\r\n"), req)
}

// TestReadResponseWaitsForTheHead checks heads that arrive a byte at a time, and heads
// larger than the buffer.
func TestReadResponseWaitsForTheHead(t *testing.T) {
	for _, raw := range append(answers, slowPaths...) {
		assertSameAsNetHTTP(t, []byte(raw), nil, iotest.OneByteReader)
	}
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\nContent-Length: 2\r\n\r\nok"
	assertSameAsNetHTTP(t, []byte(big), nil)
}

func FuzzReadResponse(f *testing.F) {
	for _, raw := range append(answers, slowPaths...) {
		f.Add([]byte(raw), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, oneByte bool) {
		if oneByte {
			assertSameAsNetHTTP(t, raw, nil, iotest.OneByteReader)
		} else {
			assertSameAsNetHTTP(t, raw, nil)
		}
	})
}

// assertSameAsNetHTTP reads raw with ReadResponse and with http.ReadResponse, each
// through wrap (if any) and a 4 KiB buffer, and compares the responses, their bodies and
// what is left after them.
func assertSameAsNetHTTP(t *testing.T, raw []byte, req *http.Request, wrap ...func(io.Reader) io.Reader) {
	t.Helper()
	gotBR, wantBR := h1wiretest.Reader(raw, 4096, wrap...), h1wiretest.Reader(raw, 4096, wrap...)
	got, gotErr := ReadResponse(gotBR, req)
	want, wantErr := http.ReadResponse(wantBR, req)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, net/http's %v", raw, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	type fields struct {
		Status                             string
		StatusCode, ProtoMajor, ProtoMinor int
		Proto                              string
		Header, Trailer                    http.Header
		ContentLength                      int64
		TransferEncoding                   []string
		Close, Uncompressed                bool
		Request                            *http.Request
	}
	of := func(r *http.Response) fields {
		return fields{r.Status, r.StatusCode, r.ProtoMajor, r.ProtoMinor, r.Proto, r.Header, r.Trailer,
			r.ContentLength, r.TransferEncoding, r.Close, r.Uncompressed, r.Request}
	}
	if g, w := of(got), of(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%q:\n got %+v\nwant %+v", raw, g, w)
	}
	if (got.Body == http.NoBody) != (want.Body == http.NoBody) {
		t.Errorf("%q: body is NoBody: %t, net/http's %t", raw, got.Body == http.NoBody, want.Body == http.NoBody)
	}
	h1wiretest.AssertSameBodies(t, raw, got.Body, want.Body, gotBR, wantBR)
	if !reflect.DeepEqual(got.Trailer, want.Trailer) {
		t.Fatalf("%q: trailer %q, net/http's %q", raw, got.Trailer, want.Trailer)
	}
}
