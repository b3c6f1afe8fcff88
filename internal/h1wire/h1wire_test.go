package h1wire

import (
	"bufio"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseFields checks ParseFields against textproto.Reader.ReadMIMEHeader: whatever
// field lines it takes, net/textproto reads to the same header.
func FuzzParseFields(f *testing.F) {
	for _, seed := range []string{
		"",
		"Host: h",
		"content-length: 2\r\nX-A: 1\r\nx-a:  2 \t\r\nX-Weird_Name-1: v",
		"X: a\r\n b",
		"X : a",
		"X: a\x01",
		"X: a\r\n",
		"X: é",
		"x-\xff: 1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, ok := ParseFields(text)
		if !ok {
			return
		}
		want, err := textproto.NewReader(bufio.NewReader(strings.NewReader(text + "\r\n\r\n"))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("%q: parsed as %q, which net/textproto refuses: %v", text, got, err)
		}
		if !reflect.DeepEqual(got, http.Header(want)) {
			t.Fatalf("%q: parsed as %q, net/textproto's %q", text, got, want)
		}
	})
}

func TestPeekHeadFindsTheHeadOnlyWhenWhole(t *testing.T) {
	for raw, want := range map[string]string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\nbody": "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n":               "HTTP/1.1 200 OK\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\n":         "", // not whole
		"GET / HTTP/1.1\nHost: h\n\n":           "", // bare line feeds: net/http's to read
		"GET / HTTP/1.1\r\nHost: h\n\r\n":       "",
	} {
		head, ok := PeekHead(bufio.NewReader(strings.NewReader(raw)))
		if string(head) != want || ok != (want != "") {
			t.Errorf("PeekHead(%q) = %q, %t; want %q", raw, head, ok, want)
		}
	}
}

func TestContentLengthTakesOnlyOnePlainNumber(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   int64
		ok     bool
	}{
		{[]string{"0"}, 0, true},
		{[]string{"17"}, 17, true},
		{[]string{"007"}, 7, true},
		{[]string{"999999999999999999"}, 999999999999999999, true},
		{nil, 0, false},
		{[]string{""}, 0, false},
		{[]string{"+2"}, 0, false},
		{[]string{"2 2"}, 0, false},
		{[]string{"0x10"}, 0, false},
		{[]string{"1000000000000000000"}, 0, false}, // 19 digits: net/http's to read
		{[]string{"2", "2"}, 0, false},
	} {
		if got, ok := ContentLength(tt.values); got != tt.want || ok != tt.ok {
			t.Errorf("ContentLength(%q) = %d, %t; want %d, %t", tt.values, got, ok, tt.want, tt.ok)
		}
	}
}
