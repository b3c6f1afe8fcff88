package h1serve

import (
	"bufio"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-llm/switchboard/internal/h1wire"
)

// readCommonRequest reads the request at the start of br when its head has arrived
// whole and is one that parseCommonHead takes, as http.ReadRequest would read it, with
// fewer allocations: the head's names and values share one string. It reports false,
// having consumed nothing, for any other request, which http.ReadRequest then reads.
func readCommonRequest(br *bufio.Reader) (*http.Request, bool) {
	head, ok := h1wire.PeekHead(br)
	if !ok {
		return nil, false
	}
	req, ok := parseCommonHead(head)
	if !ok {
		return nil, false
	}
	_, _ = br.Discard(len(head))
	req.Body = http.NoBody
	if req.ContentLength > 0 {
		req.Body = h1wire.NewBody(br, req.ContentLength)
	}
	return req, true
}

// parseCommonHead parses head, a whole request head, and returns the request without
// its body when it is as clients of the gateway send them: a request line of a token,
// a target in origin form (a path) and HTTP/1.1; every field line plainly valid; at most
// one Host; no Transfer-Encoding, Trailer or Pragma; and at most one Content-Length, of
// digits. net/http reads those without changing the header, and the others are its to
// read or refuse.
func parseCommonHead(head []byte) (*http.Request, bool) {
	text := string(head[:len(head)-len("\r\n\r\n")]) // every name and value is a part of it
	line, fields, _ := strings.Cut(text, "\r\n")
	method, line, ok := strings.Cut(line, " ")
	if !ok || !httpguts.ValidHeaderFieldName(method) { // a method is a token, as a name is
		return nil, false
	}
	target, proto, ok := strings.Cut(line, " ")
	if !ok || proto != "HTTP/1.1" || !strings.HasPrefix(target, "/") {
		return nil, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, false
	}
	header, ok := h1wire.ParseFields(fields)
	if !ok {
		return nil, false
	}
	req := &http.Request{
		Method: method, URL: u, RequestURI: target,
		Proto: proto, ProtoMajor: 1, ProtoMinor: 1,
		Header: header,
	}
	for _, name := range []string{"Transfer-Encoding", "Trailer", "Pragma"} {
		if _, ok := header[name]; ok {
			return nil, false
		}
	}
	switch hosts := header["Host"]; len(hosts) {
	case 0:
	case 1:
		req.Host = hosts[0]
		delete(header, "Host") // as http.ReadRequest does
	default:
		return nil, false
	}
	if cl := header["Content-Length"]; len(cl) > 0 {
		if req.ContentLength, ok = h1wire.ContentLength(cl); !ok {
			return nil, false
		}
	}
	req.Close = httpguts.HeaderValuesContainsToken(header["Connection"], "close")
	return req, true
}
