// Package h1wiretest holds what the differential tests of the fast paths built on
// package h1wire share: reading a message through the same kind of reader as net/http
// does, and comparing its body, and what follows it on the connection, with net/http's.
package h1wiretest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"
)

// Reader returns a reader of raw through wrap (if any) and a buffer of size bytes.
func Reader(raw []byte, size int, wrap ...func(io.Reader) io.Reader) *bufio.Reader {
	var r io.Reader = bytes.NewReader(raw)
	for _, w := range wrap {
		r = w(r)
	}
	return bufio.NewReaderSize(r, size)
}

// AssertSameBodies reads got and want, the bodies of raw as the fast path and net/http
// read it, to their ends and once more, and then what is left of gotBR and wantBR
// after them; it fails t where the bytes or the errors differ.
func AssertSameBodies(t testing.TB, raw []byte, got, want io.Reader, gotBR, wantBR *bufio.Reader) {
	t.Helper()
	gotBody, gotErr := io.ReadAll(got)
	wantBody, wantErr := io.ReadAll(want)
	if !bytes.Equal(gotBody, wantBody) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: body %q, %v; net/http's %q, %v", raw, gotBody, gotErr, wantBody, wantErr)
	}
	_, gotErr = got.Read(make([]byte, 1)) // and once more
	_, wantErr = want.Read(make([]byte, 1))
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: a read after the end: %v, net/http's %v", raw, gotErr, wantErr)
	}
	gotRest, _ := io.ReadAll(gotBR)
	wantRest, _ := io.ReadAll(wantBR)
	if !bytes.Equal(gotRest, wantRest) {
		t.Fatalf("%q: left %q after the body, net/http %q", raw, gotRest, wantRest)
	}
}
